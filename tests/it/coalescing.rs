//! Coalesced bookings answer exactly as one-at-a-time bookings would.

use std::collections::BTreeMap;
use std::time::Duration;

use diesel::RunQueryDsl;
use haita::auth::Role;
use haita::auth::session::Ticket;
use haita::bookings::BookingError;
use haita::bookings::model::BookingDate;
use haita::bookings::service;
use haita::locking::Turn;
use rand::Rng;

use crate::common::{
    Client, TestApp, TestDb, create_resource, create_user, error_code, future_day, invariants,
    log_in_directly,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Booked,
    AlreadyBooked,
    FullyBooked,
    SessionEnded,
}

fn outcome(answer: &Result<haita::bookings::model::Reservation, BookingError>) -> Outcome {
    match answer {
        Ok(_) => Outcome::Booked,
        Err(BookingError::AlreadyBooked) => Outcome::AlreadyBooked,
        Err(BookingError::FullyBooked { .. }) => Outcome::FullyBooked,
        Err(BookingError::SessionEnded) => Outcome::SessionEnded,
        Err(other) => panic!("unexpected answer {other}"),
    }
}

/// Two identical databases (same users, same resource, same ids), one random workload of 120
/// requests over four days: booked one at a time on one database, in random batches on the
/// other. Every request gets the same answer both ways, and the days end up identical. Two of
/// the twelve users send a ticket whose session has ended: they book nothing, either way, and
/// take no place from the requests after them.
#[test]
fn a_random_workload_gets_the_same_answers_in_batches_as_one_at_a_time() {
    let (alone, batched) = (TestDb::new(), TestDb::new());
    let ended = |user: i64| user == 3 || user == 8;
    let tickets: Vec<Vec<Ticket>> = [&alone, &batched]
        .into_iter()
        .map(|db| {
            let tickets: Vec<Ticket> = (0..12)
                .map(|i| log_in_directly(db, create_user(db, &format!("u{i:02}"), Role::Customer).id))
                .collect();
            create_resource(db, "Equivalence room", 3);
            haita::db::cached_sql::<diesel::sql_types::Untyped>(
                "DELETE FROM user_sessions WHERE user_id IN (3, 8)",
            )
            .execute(&mut db.raw_connection())
            .expect("end two sessions");
            tickets
        })
        .collect();
    let ticket = |db: usize, user: i64| &tickets[db][usize::try_from(user - 1).expect("user id")];
    assert!((1..=12).all(|user| ticket(0, user).user_id() == user && ticket(1, user).user_id() == user));
    let resource = 1;
    let first = future_day();
    let today = service::today();
    let days: Vec<BookingDate> = (0..4)
        .map(|i| BookingDate::parse(&(first + chrono::Days::new(i)).to_string(), today).expect("bookable"))
        .collect();
    let mut rng = rand::rng();
    let workload: Vec<(i64, BookingDate)> =
        (0..120).map(|_| (rng.random_range(1..=12), days[rng.random_range(0..days.len())])).collect();

    let wait = Duration::from_secs(5);
    let one_at_a_time: Vec<Outcome> = workload
        .iter()
        .map(|(user, day)| {
            let turn = Turn::unqueued(alone.pool.names().booking(resource, day.day()), wait);
            outcome(&service::book(&alone.pool, turn, ticket(0, *user), resource, *day, None, 30))
        })
        .collect();

    // Per day, the same arrival order, cut into batches of 1 to 9.
    let mut batched_outcomes = vec![None; workload.len()];
    for day in &days {
        let positions: Vec<usize> = (0..workload.len()).filter(|&i| workload[i].1 == *day).collect();
        let mut rest = &positions[..];
        while !rest.is_empty() {
            let size = rng.random_range(1..=9).min(rest.len());
            let (batch, tail) = rest.split_at(size);
            let users: Vec<Ticket> = batch.iter().map(|&i| ticket(1, workload[i].0).clone()).collect();
            let turn = Turn::unqueued(batched.pool.names().booking(resource, day.day()), wait);
            let answers = haita::bookings::batch::book_batch(&batched.pool, turn, resource, *day, &users, 30)
                .expect("batch");
            for (&i, answer) in batch.iter().zip(&answers) {
                batched_outcomes[i] = Some(outcome(answer));
            }
            rest = tail;
        }
    }
    let batched_outcomes: Vec<Outcome> = batched_outcomes.into_iter().map(|o| o.expect("answered")).collect();

    for day in &days {
        let per_day = |outcomes: &[Outcome]| -> Vec<(i64, Outcome)> {
            workload.iter().zip(outcomes).filter(|((_, d), _)| d == day).map(|((u, _), o)| (*u, *o)).collect()
        };
        assert_eq!(per_day(&one_at_a_time), per_day(&batched_outcomes), "answers for {}", day.day());
        assert_eq!(
            invariants::confirmed_users_on(&alone, resource, day.day()),
            invariants::confirmed_users_on(&batched, resource, day.day()),
            "bookings of {}",
            day.day()
        );
    }
    let tally: BTreeMap<Outcome, usize> = one_at_a_time.iter().fold(BTreeMap::new(), |mut t, o| {
        *t.entry(*o).or_default() += 1;
        t
    });
    assert_eq!(tally.len(), 4, "the workload exercised every answer: {tally:?}");
    for (&(user, _), outcome) in workload.iter().zip(&one_at_a_time) {
        assert_eq!(ended(user), *outcome == Outcome::SessionEnded, "user {user}: {outcome:?}");
    }
    for db in [&alone, &batched] {
        invariants::no_day_over_capacity(db);
        invariants::no_user_booked_twice(db);
    }
}

/// 64 clients on one day through two instances with coalescing on (the default): exactly the
/// capacity is booked, everyone else is told the day is full (or busy), and batches really
/// formed.
#[actix_web::test]
async fn a_hot_day_is_booked_in_batches_and_never_overbooked() {
    let app = TestApp::spawn_instances(2, |c| c.coalesce_bookings = true).await;
    let resource = app.resource("Flash sale", 3);
    let day = future_day();
    let clients: Vec<Client> = (0..64).map(|i| app.client(i)).collect();
    for (i, client) in clients.iter().enumerate() {
        client.login(&app.user(&format!("f{i:02}"), Role::Customer)).await;
    }
    let before = batch_stats(&clients[0]).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(clients.len()));
    let answers = futures::future::join_all(clients.iter().map(|client| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            let response = client.book(resource, day).await;
            let status = response.status().as_u16();
            (status, if status == 201 { String::new() } else { error_code(response).await })
        }
    }))
    .await;
    let after = batch_stats(&clients[0]).await;

    assert_eq!(answers.iter().filter(|(s, _)| *s == 201).count(), 3, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(s, c)| *s == 201 || (*s == 409 && c == "fully_booked") || (*s == 503 && c == "busy")),
        "{answers:?}"
    );
    let (batches, bookings) = (after.0 - before.0, after.1 - before.1);
    assert!(bookings > batches, "some batch decided more than one booking ({bookings} in {batches})");
    assert_eq!(invariants::confirmed_on(&app.db, resource, day), 3);
    invariants::no_day_over_capacity(&app.db);
    invariants::no_user_booked_twice(&app.db);
    invariants::no_named_lock_left_held(&app.db);
}

/// (batches, bookings in them) from this instance's `/metrics`.
async fn batch_stats(client: &Client) -> (f64, f64) {
    let metrics = client.metrics().await;
    let value = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (value("haita_booking_batch_size_count"), value("haita_booking_batch_size_sum"))
}
