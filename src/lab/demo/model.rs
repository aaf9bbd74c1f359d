use chrono::NaiveDate;
use diesel::prelude::*;

use crate::lab::schema::{demo_bookings, demo_races, demo_resources, demo_stays};

#[derive(Clone, Debug, Queryable, Selectable, Identifiable)]
#[diesel(table_name = demo_resources, check_for_backend(crate::db::MultiBackend))]
pub struct DemoResource {
    pub id: i64,
    pub strategy: String,
    pub capacity: i32,
}

impl DemoResource {
    pub fn by_id(id: i64) -> demo_resources::BoxedQuery<'static, crate::db::MultiBackend> {
        demo_resources::table.filter(demo_resources::id.eq(id)).into_boxed()
    }
}

#[derive(Debug, Insertable)]
#[diesel(table_name = demo_resources, check_for_backend(crate::db::MultiBackend))]
pub struct NewDemoResource<'a> {
    pub strategy: &'a str,
    pub capacity: i32,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = demo_bookings, check_for_backend(crate::db::MultiBackend))]
pub struct NewDemoBooking {
    pub demo_resource_id: i64,
    pub day: NaiveDate,
    pub client: i32,
    pub slot: Option<i32>,
}

/// A stay of the `exclusion-constraint` strategy: the nights `check_in` … `check_out` − 1.
#[derive(Debug, Insertable)]
#[diesel(table_name = demo_stays, check_for_backend(crate::db::MultiBackend))]
pub struct NewDemoStay {
    pub demo_resource_id: i64,
    pub check_in: NaiveDate,
    pub check_out: NaiveDate,
    pub client: i32,
}

/// The bookings of one demo resource on one day: the rows every strategy counts.
pub fn bookings_on(
    resource_id: i64,
    day: NaiveDate,
) -> demo_bookings::BoxedQuery<'static, crate::db::MultiBackend> {
    demo_bookings::table
        .filter(demo_bookings::demo_resource_id.eq(resource_id))
        .filter(demo_bookings::day.eq(day))
        .into_boxed()
}

#[derive(Debug, Insertable)]
#[diesel(table_name = demo_races, check_for_backend(crate::db::MultiBackend))]
pub struct NewDemoRace<'a> {
    pub started_by: &'a str,
    pub report: &'a str,
}
