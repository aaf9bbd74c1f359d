// @generated automatically by Diesel CLI.

diesel::table! {
    audit_events (id) {
        id -> Bigint,
        at -> Datetime,
        actor_user_id -> Nullable<Bigint>,
        #[max_length = 40]
        action -> Varchar,
        #[max_length = 100]
        subject -> Varchar,
        #[max_length = 1000]
        detail -> Varchar,
    }
}

diesel::table! {
    edit_locks (lock_key) {
        #[max_length = 64]
        lock_key -> Varchar,
        owner_user_id -> Bigint,
        #[max_length = 64]
        owner_session -> Varchar,
        acquired_at -> Datetime,
        heartbeat_at -> Datetime,
        expires_at -> Datetime,
        held_by_batch -> Bool,
    }
}

diesel::table! {
    reservations (id) {
        id -> Bigint,
        resource_id -> Bigint,
        user_id -> Bigint,
        day -> Date,
        #[max_length = 16]
        status -> Varchar,
        created_at -> Datetime,
        cancelled_at -> Nullable<Datetime>,
    }
}

diesel::table! {
    resources (id) {
        id -> Bigint,
        #[max_length = 100]
        name -> Varchar,
        description -> Text,
        capacity -> Integer,
        version -> Integer,
        updated_at -> Datetime,
    }
}

diesel::table! {
    users (id) {
        id -> Bigint,
        #[max_length = 64]
        username -> Varchar,
        #[max_length = 100]
        display_name -> Varchar,
        #[max_length = 255]
        password_hash -> Varchar,
        #[max_length = 16]
        role -> Varchar,
        is_demo -> Bool,
        created_at -> Datetime,
    }
}

diesel::joinable!(audit_events -> users (actor_user_id));
diesel::joinable!(edit_locks -> users (owner_user_id));
diesel::joinable!(reservations -> resources (resource_id));
diesel::joinable!(reservations -> users (user_id));

diesel::allow_tables_to_appear_in_same_query!(audit_events, edit_locks, reservations, resources, users,);
