use chrono::NaiveDateTime;
use diesel::prelude::*;

use crate::db::text_enum;
use crate::schema::users;

text_enum! {
    /// What a user may do. Each role includes everything the roles before it may do.
    pub enum Role {
        Customer => "customer",
        Staff => "staff",
        Admin => "admin",
    }
}

impl Role {
    fn rank(self) -> u8 {
        match self {
            Role::Customer => 0,
            Role::Staff => 1,
            Role::Admin => 2,
        }
    }

    /// Whether this role includes `needed`.
    pub fn includes(self, needed: Role) -> bool {
        self.rank() >= needed.rank()
    }
}

#[derive(Clone, Debug, Queryable, Selectable, Identifiable)]
#[diesel(table_name = users, check_for_backend(crate::db::MultiBackend))]
pub struct User {
    pub id: i64,
    pub username: String,
    pub display_name: String,
    pub password_hash: String,
    pub role: Role,
    pub is_demo: bool,
    pub created_at: NaiveDateTime,
}

impl User {
    pub fn by_username(name: &str) -> users::BoxedQuery<'_, crate::db::MultiBackend> {
        users::table.filter(users::username.eq(name)).into_boxed()
    }
}

#[derive(Debug, Insertable)]
#[diesel(table_name = users, check_for_backend(crate::db::MultiBackend))]
pub struct NewUser<'a> {
    pub username: &'a str,
    pub display_name: &'a str,
    pub password_hash: &'a str,
    pub role: Role,
    pub is_demo: bool,
}
