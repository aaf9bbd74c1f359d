//! HTTP for resources: the list, the edit page (whose start form takes the edit lock), its script,
//! the save, and the JSON edit-lock endpoints of a resource.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::editing::{self, FormSaved, Opened};
use super::model::{DESCRIPTION_MAX, ResourceChanges, ResourceInput};
use super::{FieldError, Resource, ResourceError};
use crate::audit::AuditEvent;
use crate::auth::csrf::{CsrfForm, TokenOnly};
use crate::auth::{Role, SessionUser};
use crate::edit_locks::drafts::Draft;
use crate::edit_locks::service::{self, Acquired, Policy};
use crate::edit_locks::{EditLockKey, LockView, Owner};
use crate::locking::Turn;
use crate::web::error::{BODY_LIMIT, ErrorBody, json_config};
use crate::web::{AppState, PageContext, html, see_other};

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    resources_json,
    lock_json,
    acquire_json,
    heartbeat_json,
    release_json,
    patch_json,
    draft_json,
    keep_draft_json,
    discard_draft_json
))]
pub struct Api;

/// The edit form may carry 2000 characters of Japanese description: 6 KB of UTF-8, up to 18 KB
/// once percent-encoded — above the app-wide form limit, and a user's long text must not be
/// refused for its encoding.
const EDIT_FORM_LIMIT: usize = 64 * 1024;

/// A PATCH carries the description once; in JSON a character may take 12 bytes (a surrogate
/// pair escaped as `\ud83d\ude00`), so 2000 of them need 24 KB.
const PATCH_LIMIT: usize = DESCRIPTION_MAX * 12 + BODY_LIMIT;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/resources", web::get().to(list_page))
        .route("/api/v1/resources", web::get().to(resources_json))
        .service(
            web::resource("/resources/{id}/edit")
                .app_data(web::PayloadConfig::new(EDIT_FORM_LIMIT))
                .route(web::get().to(edit_page))
                .route(web::post().to(save_form)),
        )
        .service(
            web::resource("/resources/{id}/edit/take-over")
                .app_data(web::PayloadConfig::new(EDIT_FORM_LIMIT))
                .route(web::post().to(take_over_form)),
        )
        .route("/resources/{id}/edit/start", web::post().to(start_form))
        .route("/resources/{id}/edit/cancel", web::post().to(cancel_form))
        .route("/resources/{id}/view", web::get().to(view_page))
        .route("/resources/{id}/draft/discard", web::post().to(discard_draft_form))
        .route("/resources/{id}/draft/keep", web::post().to(keep_draft_form))
        .route("/static/edit_lock.js", web::get().to(script))
        .service(
            web::resource("/api/v1/resources/{id}/edit-lock")
                .route(web::get().to(lock_json))
                .route(web::post().to(acquire_json))
                .route(web::put().to(heartbeat_json))
                .route(web::delete().to(release_json)),
        )
        .service(
            web::resource("/api/v1/resources/{id}")
                .app_data(json_config(PATCH_LIMIT))
                .route(web::patch().to(patch_json)),
        )
        .service(
            web::resource("/api/v1/resources/{id}/draft")
                .app_data(json_config(PATCH_LIMIT))
                .route(web::get().to(draft_json))
                .route(web::put().to(keep_draft_json))
                .route(web::delete().to(discard_draft_json)),
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

// ---- HTML -------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "resources/list.html")]
struct ListPage {
    ctx: PageContext,
    resources: Vec<Resource>,
}

async fn list_page(ctx: PageContext, state: web::Data<AppState>) -> actix_web::Result<HttpResponse> {
    let resources = all_resources(&state).await?;
    Ok(html(&ListPage { ctx, resources })?)
}

async fn all_resources(state: &AppState) -> Result<Vec<Resource>, ResourceError> {
    state.db(move |conn| -> Result<_, ResourceError> { Ok(Resource::list(conn)?) }).await
}

/// This request's turn at the edit lock of resource `id` (see `locking::queue`).
async fn edit_lock_turn(state: &AppState, id: i64) -> Result<Turn, ResourceError> {
    Ok(state.turn(state.pool.names().edit_lock(EditLockKey::resource(id).as_str())).await?)
}

#[derive(Template)]
#[template(path = "resources/edit.html")]
struct EditPage {
    ctx: PageContext,
    resource: Resource,
    lock: LockView,
    input: ResourceInput,
    errors: Vec<FieldError>,
    notice: Option<String>,
    heartbeat_ms: u128,
    /// The editor's kept draft, offered back (restore or discard) unless it is what the form
    /// shows already.
    draft: Option<Draft<ResourceInput>>,
}

impl EditPage {
    /// A draft's reason, as text inside a sentence of markup.
    fn escaped(&self, text: &str) -> String {
        crate::i18n::escape_html(text)
    }

    fn error_for(&self, field: &str) -> Option<String> {
        self.errors.iter().find(|e| e.field == field).map(|e| e.message_in(self.ctx.lang))
    }

    fn marks(&self, field: &str) -> String {
        let in_error: Vec<&str> =
            ["name", "description", "capacity"].into_iter().filter(|f| self.error_for(f).is_some()).collect();
        crate::web::input::field_marks(field, &in_error)
    }
}

/// Shown to everyone who does not hold the lock — and to a holder whose save was refused, with
/// their input (`unsaved`) so nothing they typed is lost.
#[derive(Template)]
#[template(path = "resources/locked.html")]
struct LockedPage {
    ctx: PageContext,
    resource: Resource,
    /// Who holds it now; `None` when nobody does (expired and removed, or force-released).
    lock: Option<LockView>,
    /// Why a save was refused, in a sentence; `None` when the page was merely opened.
    refused: Option<String>,
    unsaved: Option<ResourceInput>,
    /// The last lock event (e.g. an admin's force release with its reason).
    last_event: Option<AuditEvent>,
    /// The viewer's kept draft of this resource, if any: it waits for them.
    draft: Option<Draft<ResourceInput>>,
}

impl LockedPage {
    fn describe(&self) -> Option<String> {
        self.lock.as_ref().map(|lock| crate::edit_locks::describe_in(lock, self.ctx.lang))
    }

    /// Offer to take the lock: nobody holds it, or the holder's lock expired (not a batch's).
    fn can_take_over(&self) -> bool {
        self.lock.as_ref().is_none_or(|l| l.expired && !l.held_by_batch)
    }
}

fn with_status(
    response: Result<HttpResponse, crate::web::error::RequestError>,
    status: StatusCode,
) -> actix_web::Result<HttpResponse> {
    let mut response = response?;
    *response.status_mut() = status;
    Ok(response)
}

fn values_of(resource: &Resource) -> ResourceInput {
    ResourceInput {
        name: Some(resource.name.clone()),
        description: Some(resource.description.clone()),
        capacity: Some(resource.capacity.to_string()),
    }
}

fn heartbeat_ms(state: &AppState) -> u128 {
    // Three heartbeats per lifetime at least, so one lost request does not lose the lock; and
    // one every 15 s at most apart, so a page whose lock was taken learns it within 15 s.
    (state.config.edit_lock_ttl.as_millis() / 3).clamp(500, 15_000)
}

async fn open(
    state: &AppState,
    user: &SessionUser,
    id: i64,
    policy: Policy,
) -> Result<Opened, ResourceError> {
    let owner = editor(user)?;
    let turn = edit_lock_turn(state, id).await?;
    let ttl = state.config.edit_lock_ttl;
    state.with_pool(move |pool| editing::open_editor(pool, turn, ttl, id, &owner, policy)).await
}

/// `input`: unsaved input to put in the editor instead of the stored values (carried by a
/// take-over, or a restored draft).
fn render_opened(
    ctx: PageContext,
    state: &AppState,
    opened: Opened,
    input: Option<ResourceInput>,
) -> actix_web::Result<HttpResponse> {
    match opened {
        Opened::Editing(resource, lock, draft) => {
            let notice = input
                .as_ref()
                .map(|_| ctx.lang.t_with("edit.restored", [("version", resource.version.to_string())]));
            let input = input.unwrap_or_else(|| values_of(&resource));
            // Offered unless the form shows it already, or it holds nothing the record lacks.
            let draft = draft.filter(|d| d.fields != input && d.fields != values_of(&resource));
            Ok(html(&EditPage {
                ctx,
                resource,
                lock,
                input,
                errors: Vec::new(),
                notice,
                heartbeat_ms: heartbeat_ms(state),
                draft,
            })?)
        }
        Opened::Locked(resource, lock, draft) => with_status(
            html(&LockedPage {
                ctx,
                resource,
                lock: Some(*lock),
                refused: None,
                unsaved: input,
                last_event: None,
                draft,
            }),
            StatusCode::LOCKED,
        ),
    }
}

/// The page before the editor: it shows what opening the editor means and takes the lock with a
/// POST (by script as it loads, or its button).
#[derive(Template)]
#[template(path = "resources/start.html")]
struct StartPage {
    ctx: PageContext,
    resource: Resource,
}

#[derive(Deserialize)]
struct EditQuery {
    /// `restore`: open the editor with the kept draft in the form.
    draft: Option<String>,
}

/// The editor, when this session holds the lock; someone else's lock (even an expired one, with
/// a take-over button) when they do; else the page that takes the lock. A GET changes nothing:
/// a link, a prefetch or a preview must not lock a resource in a staff member's name.
async fn edit_page(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<EditQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, path.into_inner());
    let user_id = owner.user_id;
    let editing::EditorState { resource, lock, draft } =
        state.db(move |conn| editing::editor_state(conn, id, user_id)).await?;
    match lock {
        Some(lock) if lock.is_owned_by(&owner) && !lock.expired => {
            let restored = draft.as_ref().filter(|_| query.draft.as_deref() == Some("restore"));
            let input = restored.map(|d| d.fields.clone());
            render_opened(ctx, &state, Opened::Editing(resource, lock, draft), input)
        }
        Some(lock) if !lock.is_owned_by(&owner) => {
            render_opened(ctx, &state, Opened::Locked(resource, Box::new(lock), draft), None)
        }
        _ => Ok(html(&StartPage { ctx, resource })?),
    }
}

/// A read-only view of the resource as stored, and who is editing it: for any staff member,
/// whoever holds the lock. Takes nothing and changes nothing.
#[derive(Template)]
#[template(path = "resources/view.html")]
struct ViewPage {
    ctx: PageContext,
    resource: Resource,
    lock: Option<LockView>,
    /// Days it is closed from today on, and why (`closures`).
    closed: Vec<(chrono::NaiveDate, String)>,
    /// Arrived from "Keep my changes as my draft".
    draft_kept: bool,
}

#[derive(Deserialize)]
struct ViewQuery {
    draft: Option<String>,
}

async fn view_page(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<ViewQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    editor(&user)?;
    let id = resource_id(path)?;
    let editing::ResourceView { resource, lock, closed } =
        state.db(move |conn| editing::view(conn, id)).await?;
    Ok(html(&ViewPage { ctx, resource, lock, closed, draft_kept: query.draft.as_deref() == Some("kept") })?)
}

/// Keep what I typed on the page of a refused save as my draft, whoever holds the lock now;
/// then the resource as stored, read-only.
async fn keep_draft_form(
    user: SessionUser,
    path: web::Path<i64>,
    CsrfForm(input): CsrfForm<ResourceInput>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    keep_draft(&state, owner, id, bounded(input)?, "kept from the page of your refused save").await?;
    Ok(see_other(&format!("/resources/{id}/view?draft=kept")))
}

/// Discard my kept draft of this resource and go back to the editor.
async fn discard_draft_form(
    user: SessionUser,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    state.db(move |conn| editing::discard_draft(conn, id, owner.user_id)).await?;
    Ok(see_other(&format!("/resources/{id}/edit")))
}

/// Start editing: take the lock when it is free (or renew ours) and open the editor; someone
/// else's lock, even an expired one, is shown instead (taking that over is its own button).
async fn start_form(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    match open(&state, &user, id, Policy::FreeOrMine).await? {
        Opened::Editing(..) => Ok(see_other(&format!("/resources/{id}/edit"))),
        opened => render_opened(ctx, &state, opened, None),
    }
}

/// The take-over button. It may carry the unsaved input of a refused save, which the editor
/// then shows instead of the stored values.
async fn take_over_form(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    CsrfForm(input): CsrfForm<ResourceInput>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    let carried = input.name.is_some() || input.description.is_some() || input.capacity.is_some();
    match open(&state, &user, id, Policy::TakeOverExpired).await? {
        Opened::Editing(..) if !carried => Ok(see_other(&format!("/resources/{id}/edit"))),
        opened => render_opened(ctx, &state, opened, carried.then_some(input)),
    }
}

/// Cancel: release my lock (if I still hold it) and go back to the resource.
async fn cancel_form(
    user: SessionUser,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, path.into_inner());
    state.db(move |conn| editing::cancel(conn, id, &owner)).await?;
    Ok(see_other(&format!("/resources/{id}")))
}

/// The editor's fields, and the epoch of the lock it was opened under (a hidden field).
#[derive(Deserialize)]
struct SaveForm {
    #[serde(flatten)]
    input: ResourceInput,
    lock_epoch: Option<String>,
}

/// An edit-lock epoch as a client sent it.
fn epoch(given: Option<&str>) -> Result<i64, ResourceError> {
    let given = given.ok_or(ResourceError::EpochRequired)?.trim();
    given.parse().map_err(|_| ResourceError::BadEpoch(given.chars().take(20).collect()))
}

/// Save: only while holding the lock the editor was opened under (checked in the save's own
/// transaction). A refused save shows the user what they typed, and why it was refused.
async fn save_form(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    CsrfForm(form): CsrfForm<SaveForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, path.into_inner());
    let lock_epoch = epoch(form.lock_epoch.as_deref())?;
    let input = form.input;
    let (saver, submitted) = (owner.clone(), input.clone());
    let saved = state.db(move |conn| editing::save_form(conn, id, &saver, lock_epoch, &submitted)).await?;
    match saved {
        FormSaved::Saved => Ok(see_other(&format!("/resources/{id}?saved=1"))),
        FormSaved::Invalid { resource, lock, errors } => {
            let page = EditPage {
                ctx,
                resource,
                lock,
                input,
                errors,
                notice: None,
                heartbeat_ms: heartbeat_ms(&state),
                draft: None,
            };
            with_status(html(&page), StatusCode::UNPROCESSABLE_ENTITY)
        }
        FormSaved::Refused { resource, lock, last_event } => {
            let refused = Some(match &lock {
                Some(mine) if mine.is_owned_by(&owner) && mine.epoch != lock_epoch => {
                    ctx.lang.t("locked.refused.superseded").into_owned()
                }
                Some(other) if !other.expired => ctx.lang.t_with(
                    "locked.refused.taken_over",
                    [("holder", crate::edit_locks::describe_in(other, ctx.lang))],
                ),
                _ => ctx.lang.t("locked.refused.not_held").into_owned(),
            });
            // The input is kept as a draft by the refusal itself (`editing::save_form`).
            let page =
                LockedPage { ctx, resource, lock, refused, unsaved: Some(input), last_event, draft: None };
            with_status(html(&page), StatusCode::LOCKED)
        }
    }
}

/// The heartbeat and release-on-leave script of the edit page.
async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(include_str!("../../static/edit_lock.js"))
}

// ---- JSON -------------------------------------------------------------------------------

/// Every resource and its capacity per day.
#[utoipa::path(get, path = "/api/v1/resources", tag = "resources", responses((status = 200, body = Vec<Resource>)))]
async fn resources_json(state: web::Data<AppState>) -> Result<HttpResponse, ResourceError> {
    Ok(HttpResponse::Ok().json(all_resources(&state).await?))
}

/// The resource's edit lock, if any (staff).
#[utoipa::path(get, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 200, body = LockView), (status = 404, description = "no lock, or no such resource", body = ErrorBody),
              (status = 403, description = "staff only", body = ErrorBody)))]
async fn lock_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    editor(&user)?;
    let id = path.into_inner();
    let lock = state.db(move |conn| editing::lock_of(conn, id)).await?;
    Ok(HttpResponse::Ok().json(lock))
}

/// Acquire (201), renew my own (200), or take over an expired one (201); 423 while someone
/// else's lock is live.
#[utoipa::path(post, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 201, description = "Acquired, or an expired lock taken over", body = LockView),
              (status = 200, description = "Already mine; expiry extended", body = LockView),
              (status = 403, description = "staff only", body = ErrorBody),
              (status = 423, description = "edit_locked, with holder and expires_at", body = ErrorBody)))]
async fn acquire_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let (owner, id) = (editor(&user)?, path.into_inner());
    let turn = edit_lock_turn(&state, id).await?;
    let ttl = state.config.edit_lock_ttl;
    let (_, acquired, lock) = state
        .with_pool(move |pool| editing::open(pool, turn, ttl, id, &owner, Policy::TakeOverExpired))
        .await?;
    Ok(match acquired {
        Acquired::Renewed { .. } => HttpResponse::Ok().json(lock),
        Acquired::New | Acquired::TookOver(_) => HttpResponse::Created().json(lock),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeartbeatQuery {
    /// The epoch the caller's editor was opened under: 423 once the lock is a later one.
    epoch: Option<i64>,
}

/// Heartbeat: extend my lock by the TTL. With `epoch`, a page whose lock was ended and taken
/// again since (by this session, in another tab) learns it: 423 `edit_lock_superseded`.
#[utoipa::path(put, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id"),
           ("epoch" = Option<i64>, Query, description = "The epoch the caller's editor was opened under")),
    responses((status = 200, body = LockView), (status = 423, description = "not mine (taken over, released or expired), or edit_lock_superseded", body = ErrorBody),
              (status = 403, description = "staff only", body = ErrorBody)))]
async fn heartbeat_json(
    user: SessionUser,
    path: web::Path<i64>,
    query: web::Query<HeartbeatQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let owner = editor(&user)?;
    let (ttl, id) = (state.config.edit_lock_ttl, resource_id(path)?);
    let (key, epoch) = (EditLockKey::resource(id), query.epoch);
    let lock = state.db(move |conn| service::heartbeat(conn, ttl, &key, &owner, epoch)).await?;
    Ok(HttpResponse::Ok().json(lock))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseQuery {
    /// Release only if this is still the lock's last heartbeat (see `service::release`).
    if_heartbeat: Option<chrono::DateTime<chrono::Utc>>,
}

/// Releases my lock; 204 also when there was none, or when `if_heartbeat` no longer matches
/// (releasing is idempotent). Someone else's lock is never released here: 423.
#[utoipa::path(delete, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id"),
           ("if_heartbeat" = Option<String>, Query, description = "Release only if this is still the last heartbeat")),
    responses((status = 204), (status = 423, description = "someone else's lock", body = ErrorBody),
              (status = 403, description = "staff only", body = ErrorBody)))]
async fn release_json(
    user: SessionUser,
    path: web::Path<i64>,
    query: web::Query<ReleaseQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let owner = editor(&user)?;
    let (id, if_heartbeat) = (resource_id(path)?, query.if_heartbeat.map(|t| t.naive_utc()));
    state
        .db(move |conn| {
            let key = EditLockKey::resource(id);
            service::release(conn, &key, &owner, if_heartbeat, service::BY_ITS_OWNER)
        })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ResourcePatch {
    #[schema(min_length = 1, max_length = 100)]
    name: Option<String>,
    #[schema(max_length = 2000)]
    description: Option<String>,
    #[schema(minimum = 1, maximum = 10000)]
    capacity: Option<i64>,
}

/// Changes a resource; only the holder of its edit lock may, and only under the acquisition named
/// by `Edit-Lock-Epoch` (423 otherwise). The lock is kept.
#[utoipa::path(patch, path = "/api/v1/resources/{id}", tag = "resources", request_body = ResourcePatch,
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id"),
           ("Edit-Lock-Epoch" = i64, Header, description = "The epoch of the edit lock, as acquiring it answered")),
    responses((status = 200, body = Resource),
              (status = 400, description = "bad_epoch", body = ErrorBody),
              (status = 422, description = "invalid input, or capacity below a future day's bookings", body = ErrorBody),
              (status = 423, description = "edit_locked: only the lock holder may save; edit_lock_superseded: the lock was acquired again since that epoch", body = ErrorBody),
              (status = 428, description = "precondition_required: no Edit-Lock-Epoch", body = ErrorBody),
              (status = 403, description = "staff only", body = ErrorBody)))]
async fn patch_json(
    user: SessionUser,
    path: web::Path<i64>,
    request: actix_web::HttpRequest,
    body: web::Json<ResourcePatch>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let owner = editor(&user)?;
    let header = request.headers().get("Edit-Lock-Epoch").map(|value| value.to_str().unwrap_or("?"));
    let lock_epoch = epoch(header)?;
    let body = body.into_inner();
    let input = ResourceInput {
        name: body.name,
        description: body.description,
        capacity: body.capacity.map(|c| c.to_string()),
    };
    let changes = ResourceChanges::parse(&input)?;
    let id = path.into_inner();
    let saved = state.db(move |conn| editing::patch(conn, id, &owner, lock_epoch, &changes)).await?;
    Ok(HttpResponse::Ok().json(saved))
}

/// A draft as the editor's script sends it: the form's fields as typed, unvalidated.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct DraftRequest {
    #[schema(max_length = 100)]
    name: Option<String>,
    #[schema(max_length = 2000)]
    description: Option<String>,
    #[schema(max_length = 20)]
    capacity: Option<String>,
}

impl DraftRequest {
    fn into_input(self) -> Result<ResourceInput, ResourceError> {
        bounded(ResourceInput { name: self.name, description: self.description, capacity: self.capacity })
    }
}

/// The form's own limits (its `maxlength`s): a draft is half-typed, not unbounded.
fn bounded(input: ResourceInput) -> Result<ResourceInput, ResourceError> {
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
    }
    if errors.is_empty() { Ok(input) } else { Err(ResourceError::Invalid(errors)) }
}

/// Keeps `input` as `owner`'s draft of resource `id`.
async fn keep_draft(
    state: &AppState,
    owner: Owner,
    id: i64,
    input: ResourceInput,
    why: &'static str,
) -> Result<(), ResourceError> {
    state.db(move |conn| editing::keep_draft(conn, id, owner.user_id, &input, why)).await
}

/// My kept draft of this resource (staff): what I typed and did not save, when and why it was kept.
#[utoipa::path(get, path = "/api/v1/resources/{id}/draft", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 200, body = Draft<ResourceInput>), (status = 404, description = "no draft kept, or no such resource", body = ErrorBody),
              (status = 403, description = "staff only", body = ErrorBody)))]
async fn draft_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    let draft = state.db(move |conn| editing::draft_of(conn, id, owner.user_id)).await?;
    Ok(HttpResponse::Ok().json(draft))
}

/// Keep what I typed in the editor as my draft (staff; the editor's script sends it with its
/// heartbeat, and at once when the lock is lost). Needs no lock: a draft is mine, not the
/// record's. It is offered back when I next open the editor.
#[utoipa::path(put, path = "/api/v1/resources/{id}/draft", tag = "resources", request_body = DraftRequest,
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 204, description = "Kept"), (status = 404, body = ErrorBody),
              (status = 422, description = "a field longer than the form allows", body = ErrorBody),
              (status = 403, description = "staff only", body = ErrorBody)))]
async fn keep_draft_json(
    user: SessionUser,
    path: web::Path<i64>,
    body: web::Json<DraftRequest>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    let input = body.into_inner().into_input()?;
    keep_draft(&state, owner, id, input, "kept from the editor while you typed").await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Discard my kept draft of this resource (staff); 204 also when there was none.
#[utoipa::path(delete, path = "/api/v1/resources/{id}/draft", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 204), (status = 403, description = "staff only", body = ErrorBody)))]
async fn discard_draft_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    state.db(move |conn| editing::discard_draft(conn, id, owner.user_id)).await?;
    Ok(HttpResponse::NoContent().finish())
}
