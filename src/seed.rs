//! Demo data: the users documented in the README and on the login page, and a few resources.
//! Idempotent: running it twice changes nothing the second time.

use diesel::prelude::*;

use crate::auth::service::{UserSpec, create_user};
use crate::auth::{AuthError, Role};
use crate::bookings::model::NewResource;
use crate::db::DbPool;
use crate::schema::resources;

/// (username, display name, password, role). Demo only: the login page shows these while they
/// exist, so never seed a production database.
pub const DEMO_USERS: &[(&str, &str, &str, Role)] = &[
    ("alice", "Alice", "alice-demo", Role::Customer),
    ("bob", "Bob", "bob-demo", Role::Customer),
    ("carol", "Carol", "carol-demo", Role::Staff),
    ("admin", "Admin", "admin-demo", Role::Admin),
];

const DEMO_RESOURCES: &[(&str, &str, i32)] = &[
    ("Meeting room 1", "Six seats, a screen and a whiteboard. One booking per day.", 1),
    ("Tennis court", "Outdoor hard court; two groups a day share it.", 2),
    ("Lab bench", "Three benches in the maker lab, booked by the day.", 3),
];

pub fn run(pool: &DbPool) -> anyhow::Result<()> {
    let mut conn = pool.get()?;
    for (username, display_name, password, role) in DEMO_USERS {
        let spec = UserSpec { username, display_name, password, role: *role, is_demo: true };
        match create_user(&mut conn, &spec) {
            Ok(user) => log::info!("seed: created demo user {} ({})", user.username, user.role),
            Err(AuthError::UsernameTaken(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (name, description, capacity) in DEMO_RESOURCES {
        let exists: i64 = resources::table.filter(resources::name.eq(name)).count().get_result(&mut conn)?;
        if exists == 0 {
            diesel::insert_into(resources::table)
                .values(NewResource { name, description, capacity: *capacity })
                .execute(&mut conn)?;
            log::info!("seed: created resource {name} (capacity {capacity})");
        }
    }
    Ok(())
}
