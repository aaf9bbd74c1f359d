// @generated automatically by Diesel CLI, then edited so that one schema serves MySQL/MariaDB and
// PostgreSQL: `Datetime` columns are declared `Timestamp` and `Unsigned<Integer>` ones `Integer`
// (diesel reads a MySQL DATETIME as `Timestamp`; PostgreSQL has neither DATETIME nor unsigned
// types). Redo these two edits after `diesel print-schema`.

diesel::table! {
    app_instances (id) {
        #[max_length = 32]
        id -> Varchar,
        #[max_length = 255]
        name -> Varchar,
        #[max_length = 64]
        version -> Varchar,
        started_at -> Timestamp,
        last_seen -> Timestamp,
        stopped_at -> Nullable<Timestamp>,
        metrics -> Text,
    }
}

diesel::table! {
    audit_events (id) {
        id -> Bigint,
        at -> Timestamp,
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
    batch_runs (id) {
        id -> Bigint,
        #[max_length = 40]
        job -> Varchar,
        #[max_length = 10]
        policy -> Varchar,
        #[max_length = 200]
        params -> Varchar,
        #[max_length = 200]
        guard -> Varchar,
        #[max_length = 100]
        host -> Varchar,
        pid -> Integer,
        #[max_length = 10]
        status -> Varchar,
        total -> Integer,
        done -> Integer,
        skipped -> Integer,
        #[max_length = 500]
        report -> Nullable<Varchar>,
        #[max_length = 500]
        error -> Nullable<Varchar>,
        started_at -> Timestamp,
        finished_at -> Nullable<Timestamp>,
        request -> Nullable<Text>,
    }
}

diesel::table! {
    batch_run_waits (run_id) {
        run_id -> Bigint,
        #[max_length = 100]
        lock_key -> Varchar,
        #[max_length = 200]
        holder -> Varchar,
        lock_since -> Timestamp,
        lock_until -> Timestamp,
        began -> Timestamp,
        gives_up -> Timestamp,
    }
}

diesel::table! {
    batch_run_reasons (run_id, position) {
        run_id -> Bigint,
        position -> Integer,
        #[max_length = 40]
        code -> Varchar,
        #[max_length = 200]
        subject -> Varchar,
        #[max_length = 200]
        holder -> Nullable<Varchar>,
        items -> Integer,
    }
}

diesel::table! {
    deadlock_reports (id) {
        id -> Bigint,
        #[max_length = 64]
        fingerprint -> Char,
        section -> Mediumtext,
        #[max_length = 64]
        seen_by -> Varchar,
        #[max_length = 255]
        outcome -> Nullable<Varchar>,
        recorded_at -> Timestamp,
    }
}

diesel::table! {
    edit_drafts (user_id, lock_key) {
        user_id -> Bigint,
        #[max_length = 64]
        lock_key -> Varchar,
        fields -> Text,
        #[max_length = 300]
        why -> Varchar,
        saved_at -> Timestamp,
    }
}

diesel::table! {
    edit_lock_epochs (lock_key) {
        #[max_length = 64]
        lock_key -> Varchar,
        last_epoch -> Bigint,
    }
}

diesel::table! {
    edit_locks (lock_key) {
        #[max_length = 64]
        lock_key -> Varchar,
        owner_user_id -> Bigint,
        #[max_length = 64]
        owner_session -> Varchar,
        epoch -> Bigint,
        acquired_at -> Timestamp,
        heartbeat_at -> Timestamp,
        expires_at -> Timestamp,
        held_by_batch -> Bool,
    }
}

diesel::table! {
    idempotency_keys (user_id, idempotency_key) {
        user_id -> Bigint,
        #[max_length = 255]
        idempotency_key -> Varchar,
        #[max_length = 32]
        fingerprint -> Binary,
        outcome -> Nullable<Text>,
        created_at -> Timestamp,
        expires_at -> Timestamp,
    }
}

diesel::table! {
    login_failures (id) {
        id -> Bigint,
        #[max_length = 64]
        account -> Char,
        #[max_length = 64]
        address -> Varchar,
        failed_at -> Timestamp,
    }
}

diesel::table! {
    order_lines (order_id, product_id) {
        order_id -> Bigint,
        product_id -> Bigint,
        quantity -> Integer,
        unit_price_cents -> Bigint,
    }
}

diesel::table! {
    orders (id) {
        id -> Bigint,
        user_id -> Bigint,
        created_at -> Timestamp,
        total_cents -> Bigint,
    }
}

diesel::table! {
    price_revision_items (revision, product_id) {
        #[max_length = 64]
        revision -> Varchar,
        product_id -> Bigint,
        #[max_length = 10]
        status -> Varchar,
        old_price_cents -> Nullable<Bigint>,
        new_price_cents -> Nullable<Bigint>,
        run_id -> Bigint,
        at -> Timestamp,
    }
}

diesel::table! {
    products (id) {
        id -> Bigint,
        #[max_length = 32]
        sku -> Varchar,
        #[max_length = 200]
        name -> Varchar,
        description -> Text,
        price_cents -> Bigint,
        version -> Integer,
        updated_at -> Timestamp,
        updated_by -> Nullable<Bigint>,
        listed -> Bool,
    }
}

diesel::table! {
    reservations (id) {
        id -> Bigint,
        resource_id -> Bigint,
        user_id -> Bigint,
        day -> Date,
        check_out -> Date,
        nights -> Integer,
        #[max_length = 16]
        status -> Varchar,
        created_at -> Timestamp,
        cancelled_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    resource_closures (resource_id, day) {
        resource_id -> Bigint,
        day -> Date,
        #[max_length = 200]
        reason -> Varchar,
        bookings_at_close -> Integer,
        run_id -> Nullable<Bigint>,
        closed_by -> Bigint,
        closed_at -> Timestamp,
    }
}

diesel::table! {
    resources (id) {
        id -> Bigint,
        #[max_length = 100]
        name -> Varchar,
        description -> Text,
        capacity -> Integer,
        price_cents -> Bigint,
        version -> Integer,
        updated_at -> Timestamp,
    }
}

diesel::table! {
    stock_holds (id) {
        id -> Bigint,
        product_id -> Bigint,
        user_id -> Bigint,
        quantity -> Integer,
        created_at -> Timestamp,
        expires_at -> Timestamp,
        #[max_length = 16]
        ended -> Nullable<Varchar>,
        order_id -> Nullable<Bigint>,
        ended_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    stock_levels (product_id) {
        product_id -> Bigint,
        on_hand -> Integer,
    }
}

diesel::table! {
    stock_movements (id) {
        id -> Bigint,
        product_id -> Bigint,
        delta -> Integer,
        #[max_length = 16]
        reason -> Varchar,
        order_id -> Nullable<Bigint>,
        actor_user_id -> Nullable<Bigint>,
        at -> Timestamp,
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
        created_at -> Timestamp,
    }
}

diesel::joinable!(audit_events -> users (actor_user_id));
diesel::joinable!(edit_drafts -> users (user_id));
diesel::joinable!(edit_locks -> users (owner_user_id));
diesel::joinable!(idempotency_keys -> users (user_id));
diesel::joinable!(order_lines -> orders (order_id));
diesel::joinable!(order_lines -> products (product_id));
diesel::joinable!(orders -> users (user_id));
diesel::joinable!(batch_run_reasons -> batch_runs (run_id));
diesel::joinable!(batch_run_waits -> batch_runs (run_id));
diesel::joinable!(price_revision_items -> batch_runs (run_id));
diesel::joinable!(resource_closures -> batch_runs (run_id));
diesel::joinable!(resource_closures -> resources (resource_id));
diesel::joinable!(resource_closures -> users (closed_by));
diesel::joinable!(products -> users (updated_by));
diesel::joinable!(reservations -> resources (resource_id));
diesel::joinable!(reservations -> users (user_id));
diesel::joinable!(stock_holds -> orders (order_id));
diesel::joinable!(stock_holds -> products (product_id));
diesel::joinable!(stock_holds -> users (user_id));
diesel::joinable!(stock_levels -> products (product_id));
diesel::joinable!(stock_movements -> orders (order_id));
diesel::joinable!(stock_movements -> products (product_id));
diesel::joinable!(stock_movements -> users (actor_user_id));

diesel::table! {
    user_sessions (id) {
        #[max_length = 43]
        id -> Char,
        user_id -> Bigint,
        created_at -> Timestamp,
        expires_at -> Timestamp,
    }
}

diesel::joinable!(user_sessions -> users (user_id));

diesel::allow_tables_to_appear_in_same_query!(
    app_instances,
    audit_events,
    batch_run_reasons,
    batch_run_waits,
    batch_runs,
    deadlock_reports,
    edit_drafts,
    edit_lock_epochs,
    edit_locks,
    idempotency_keys,
    login_failures,
    order_lines,
    orders,
    price_revision_items,
    resource_closures,
    products,
    reservations,
    resources,
    stock_holds,
    stock_levels,
    stock_movements,
    user_sessions,
    users,
);
