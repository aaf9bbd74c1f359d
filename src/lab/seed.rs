//! Demo data: the users documented in the README and on the login page, and a few resources.
//! Idempotent: running it twice changes nothing the second time.

use diesel::prelude::*;

use std::time::Duration;

use crate::auth::service::{UserSpec, create_user};
use crate::auth::{AuthError, Role};
use crate::catalog::model::NewProduct;
use crate::db::DbPool;
use crate::inventory::model::Quantity;
use crate::locking::Turn;
use crate::resources::model::NewResource;
use crate::schema::{products, resources, users};

/// (username, display name, password, role). Demo only: the login page shows these while they
/// exist, so never seed a production database.
pub const DEMO_USERS: &[(&str, &str, &str, Role)] = &[
    ("alice", "Alice", "alice-demo", Role::Customer),
    ("bob", "Bob", "bob-demo", Role::Customer),
    ("carol", "Carol", "carol-demo", Role::Staff),
    ("admin", "Admin", "admin-demo", Role::Admin),
];

/// (name, description, capacity, price of a night in cents).
const DEMO_RESOURCES: &[(&str, &str, i32, i64)] = &[
    ("Meeting room 1", "Six seats, a screen and a whiteboard. One booking per day.", 1, 0),
    ("Tennis court", "Outdoor hard court; two groups a day share it.", 2, 0),
    ("Lab bench", "Three benches in the maker lab, booked by the day.", 3, 0),
    ("Guest room", "Two beds under the roof, for stays of up to 14 nights.", 2, 8500),
];

/// (sku, name, description, price in cents, first receipt). The last one has no stock row until
/// someone receives it: that first receipt is the one the named lock `haita:{tag}:stock:{id}` is for.
const DEMO_PRODUCTS: &[(&str, &str, &str, i64, u32)] = &[
    ("TEA-SENCHA", "Sencha 100 g", "Everyday green tea from Shizuoka.", 1200, 40),
    ("TEA-MATCHA", "Matcha 30 g", "Ceremonial grade, stone-ground.", 2400, 10),
    ("CUP-YUNOMI", "Yunomi cup", "Tall handle-less tea cup.", 1800, 5),
    ("POT-KYUSU", "Kyusu teapot", "Side-handle clay teapot; only a couple in stock.", 4800, 2),
    ("WHISK-CHASEN", "Chasen whisk", "Bamboo whisk for matcha; not received yet.", 3000, 0),
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
    for (name, description, capacity, price_cents) in DEMO_RESOURCES {
        let exists: i64 = resources::table.filter(resources::name.eq(name)).count().get_result(&mut conn)?;
        if exists == 0 {
            diesel::insert_into(resources::table)
                .values(NewResource { name, description, capacity: *capacity, price_cents: *price_cents })
                .execute(&mut conn)?;
            log::info!("seed: created resource {name} (capacity {capacity})");
        }
    }
    let receiver: i64 =
        users::table.filter(users::username.eq("carol")).select(users::id).first(&mut conn)?;
    for (sku, name, description, price_cents, stock) in DEMO_PRODUCTS {
        let exists: i64 = products::table.filter(products::sku.eq(sku)).count().get_result(&mut conn)?;
        if exists > 0 {
            continue;
        }
        diesel::insert_into(products::table)
            .values(NewProduct { sku, name, description, price_cents: *price_cents })
            .execute(&mut conn)?;
        let id: i64 = products::table.filter(products::sku.eq(sku)).select(products::id).first(&mut conn)?;
        if *stock > 0 {
            let quantity = Quantity::parse(i64::from(*stock), Quantity::MAX_PER_RECEIPT)?;
            crate::inventory::service::receive(
                pool,
                Turn::unqueued(pool.names().stock(id), Duration::from_secs(5)),
                receiver,
                id,
                quantity,
            )?;
        }
        log::info!("seed: created product {sku} ({stock} in stock)");
    }
    Ok(())
}
