//! HTTP for resources: the list, the edit page (whose start form takes the edit lock), its script,
//! the save ([`pages`]), and the JSON edit-lock and draft endpoints of a resource ([`api`]).

mod api;
mod pages;

pub use api::Api;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::editing::{self, FormSaved, Opened};
use super::model::{DESCRIPTION_MAX, ResourceChanges, ResourceInput};
use super::{FieldError, Resource, ResourceError};
use crate::app::{AppState, PageContext, html, see_other};
use crate::auth::csrf::{CsrfForm, TokenOnly};
use crate::auth::{AuthError, Role, SessionUser};
use crate::edit_locks::drafts::Draft;
use crate::edit_locks::ending::Ending;
use crate::edit_locks::service::{self, Acquired, Policy};
use crate::edit_locks::{EditLockError, EditLockKey, LockView, Owner};
use crate::locking::Turn;
use crate::wire::answers::documented_answers;
use crate::wire::error::{BODY_LIMIT, json_config};
use crate::wire::input::{code_point, stray_character};

/// The edit form may carry 2000 characters of Japanese description: 6 KB of UTF-8, up to 18 KB
/// once percent-encoded — above the app-wide form limit, and a user's long text must not be
/// refused for its encoding.
const EDIT_FORM_LIMIT: usize = 64 * 1024;

/// A PATCH carries the description once; in JSON a character may take 12 bytes (a surrogate
/// pair escaped as `\ud83d\ude00`), so 2000 of them need 24 KB.
const PATCH_LIMIT: usize = DESCRIPTION_MAX * 12 + BODY_LIMIT;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/resources", web::get().to(pages::list_page))
        .route("/api/v1/resources", web::get().to(api::resources_json))
        .service(
            web::resource("/resources/{id}/edit")
                .app_data(web::PayloadConfig::new(EDIT_FORM_LIMIT))
                .route(web::get().to(pages::edit_page))
                .route(web::post().to(pages::save_form)),
        )
        .service(
            web::resource("/resources/{id}/edit/take-over")
                .app_data(web::PayloadConfig::new(EDIT_FORM_LIMIT))
                .route(web::post().to(pages::take_over_form)),
        )
        .service(
            web::resource("/resources/{id}/edit/continue-here")
                .app_data(web::PayloadConfig::new(EDIT_FORM_LIMIT))
                .route(web::post().to(pages::continue_here_form)),
        )
        .route("/resources/{id}/edit/ended", web::get().to(pages::ended_part))
        .route("/resources/{id}/edit/start", web::post().to(pages::start_form))
        .route("/resources/{id}/edit/cancel", web::post().to(pages::cancel_form))
        .route("/resources/{id}/view", web::get().to(pages::view_page))
        .route("/resources/{id}/draft/discard", web::post().to(pages::discard_draft_form))
        .route("/resources/{id}/draft/keep", web::post().to(pages::keep_draft_form))
        .route("/static/edit_lock.js", web::get().to(pages::script))
        .service(
            web::resource("/api/v1/resources/{id}/edit-lock")
                .route(web::get().to(api::lock_json))
                .route(web::post().to(api::acquire_json))
                .route(web::put().to(api::heartbeat_json))
                .route(web::delete().to(api::release_json)),
        )
        .service(
            web::resource("/api/v1/resources/{id}")
                .app_data(json_config(PATCH_LIMIT))
                .route(web::patch().to(api::patch_json)),
        )
        .service(
            web::resource("/api/v1/resources/{id}/draft")
                .app_data(json_config(PATCH_LIMIT))
                .route(web::get().to(api::draft_json))
                .route(web::put().to(api::keep_draft_json))
                .route(web::delete().to(api::discard_draft_json)),
        );
}

/// A resource id from the path: ids are positive, so anything else names nothing (404), even on
/// the edit-lock calls that need no resource row.
fn resource_id(path: web::Path<i64>) -> Result<i64, ResourceError> {
    let id = path.into_inner();
    if id < 1 { Err(ResourceError::NotFound(id)) } else { Ok(id) }
}

/// Editing is staff work; everyone else gets 403 (401 when not logged in).
fn editor(user: &SessionUser) -> Result<Owner, ResourceError> {
    user.require(Role::Staff)?;
    Ok(Owner::from(user))
}

pub(super) async fn all_resources(state: &AppState) -> Result<Vec<Resource>, ResourceError> {
    state.off_executor.with_conn(move |conn| -> Result<_, ResourceError> { Ok(Resource::list(conn)?) }).await
}

/// This request's turn at the edit lock of resource `id` (see `locking::queue`).
pub(super) async fn edit_lock_turn(state: &AppState, id: i64) -> Result<Turn, ResourceError> {
    Ok(state.turn(state.pool().names().edit_lock(EditLockKey::resource(id).as_str())).await?)
}

/// An edit-lock epoch as a client sent it.
pub(super) fn epoch(given: Option<&str>) -> Result<i64, ResourceError> {
    let given = given.ok_or(ResourceError::EpochRequired)?.trim();
    given.parse().map_err(|_| ResourceError::BadEpoch(given.chars().take(20).collect()))
}

/// The form's own limits (its `maxlength`s): a draft is half-typed, not unbounded.
pub(super) fn bounded(input: ResourceInput) -> Result<ResourceInput, ResourceError> {
    let too_long =
        |value: &Option<String>, max: usize| value.as_ref().is_some_and(|v| v.chars().count() > max);
    let mut errors = Vec::new();
    for (field, value, max) in [
        ("name", &input.name, 100),
        ("description", &input.description, DESCRIPTION_MAX),
        ("capacity", &input.capacity, 20),
    ] {
        if too_long(value, max) {
            errors.push(FieldError::said(field, "field.too_long", &[("max", max.to_string())]));
        }
        // A draft is kept, and shown back to its author: nothing in it that could not be saved.
        if let Some(stray) = value.as_deref().and_then(|v| stray_character(v, field == "description")) {
            errors.push(FieldError::said(field, "field.stray_character", &[("code", code_point(stray))]));
        }
    }
    if errors.is_empty() { Ok(input) } else { Err(ResourceError::Invalid(errors)) }
}

/// Keeps `input` as `owner`'s draft of resource `id`.
pub(super) async fn keep_draft(
    state: &AppState,
    owner: Owner,
    id: i64,
    input: ResourceInput,
    why: &'static str,
) -> Result<(), ResourceError> {
    state.off_executor.with_conn(move |conn| editing::keep_draft(conn, id, owner.user_id, &input, why)).await
}
