// @generated automatically by Diesel CLI.

diesel::table! {
    demo_bookings (id) {
        id -> Bigint,
        demo_resource_id -> Bigint,
        day -> Date,
        client -> Integer,
        slot -> Nullable<Integer>,
        created_at -> Datetime,
    }
}

diesel::table! {
    demo_races (id) {
        id -> Bigint,
        #[max_length = 64]
        started_by -> Varchar,
        report -> Mediumtext,
        created_at -> Datetime,
    }
}

diesel::table! {
    demo_resources (id) {
        id -> Bigint,
        #[max_length = 32]
        strategy -> Varchar,
        capacity -> Integer,
        created_at -> Datetime,
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

diesel::joinable!(demo_bookings -> demo_resources (demo_resource_id));
diesel::joinable!(reservations -> resources (resource_id));
diesel::joinable!(reservations -> users (user_id));

diesel::allow_tables_to_appear_in_same_query!(
    demo_bookings,
    demo_races,
    demo_resources,
    reservations,
    resources,
    users,
);
