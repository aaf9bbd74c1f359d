// @generated automatically by Diesel CLI, on a database the lab has prepared:
// `diesel print-schema --only-tables '^demo_' > src/lab/schema.rs`. The product's tables are in
// `crate::schema`; these exist only where `crate::lab::prepare` has run. As there, `Datetime`
// is edited to `Timestamp` so that the schema serves both engines.

diesel::table! {
    demo_bookings (id) {
        id -> Bigint,
        demo_resource_id -> Bigint,
        day -> Date,
        client -> Integer,
        slot -> Nullable<Integer>,
        created_at -> Timestamp,
    }
}

diesel::table! {
    demo_flash_sales (id) {
        id -> Bigint,
        #[max_length = 64]
        started_by -> Varchar,
        running -> Nullable<Smallint>,
        lease_until -> Timestamp,
        report -> Nullable<Mediumtext>,
        #[max_length = 500]
        failure -> Nullable<Varchar>,
        created_at -> Timestamp,
        ended_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    demo_lock_rows (name) {
        #[max_length = 191]
        name -> Varchar,
        #[max_length = 64]
        owner -> Varchar,
        expires_at -> Timestamp,
    }
}

diesel::table! {
    demo_race_board (id) {
        id -> Smallint,
        seq -> Bigint,
        #[max_length = 64]
        holder -> Nullable<Varchar>,
        lease_until -> Nullable<Timestamp>,
        race -> Nullable<Mediumtext>,
        finished -> Nullable<Text>,
    }
}

diesel::table! {
    demo_races (id) {
        id -> Bigint,
        #[max_length = 64]
        started_by -> Varchar,
        report -> Mediumtext,
        created_at -> Timestamp,
    }
}

diesel::table! {
    demo_resources (id) {
        id -> Bigint,
        #[max_length = 32]
        strategy -> Varchar,
        capacity -> Integer,
        created_at -> Timestamp,
        fence -> Bigint,
    }
}

diesel::table! {
    demo_stays (id) {
        id -> Bigint,
        demo_resource_id -> Bigint,
        check_in -> Date,
        check_out -> Date,
        client -> Integer,
        created_at -> Timestamp,
    }
}

diesel::joinable!(demo_bookings -> demo_resources (demo_resource_id));
diesel::joinable!(demo_stays -> demo_resources (demo_resource_id));

diesel::allow_tables_to_appear_in_same_query!(
    demo_bookings,
    demo_flash_sales,
    demo_lock_rows,
    demo_race_board,
    demo_races,
    demo_resources,
    demo_stays,
);
