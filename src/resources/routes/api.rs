//! The JSON API: resources, a resource's edit lock (acquire, heartbeat, release), the save and
//! the editor's drafts.

use super::*;

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

/// Every resource and its capacity per day.
#[utoipa::path(get, path = "/api/v1/resources", tag = "resources", responses((status = 200, body = Vec<Resource>)))]
pub(super) async fn resources_json(state: web::Data<AppState>) -> Result<HttpResponse, ResourceError> {
    Ok(HttpResponse::Ok().json(all_resources(&state).await?))
}

documented_answers!(LockAnswers: ResourceError[NotFound], EditLockError[NoSuchLock], AuthError[Forbidden]);

/// The resource's edit lock, if any (staff).
#[utoipa::path(get, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 200, body = LockView), LockAnswers))]
pub(super) async fn lock_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    editor(&user)?;
    let id = path.into_inner();
    let lock = state.off_executor.with_conn(move |conn| editing::lock_of(conn, id)).await?;
    Ok(HttpResponse::Ok().json(lock))
}

documented_answers!(AcquireAnswers: ResourceError[NotFound], EditLockError[Locked], AuthError[Forbidden]);

/// Acquire (201), renew my own (200), or take over an expired one (201); 423 while someone
/// else's lock is live.
#[utoipa::path(post, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 201, description = "Acquired, or an expired lock taken over", body = LockView),
              (status = 200, description = "Already mine; expiry extended", body = LockView),
              AcquireAnswers))]
pub(super) async fn acquire_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let (owner, id) = (editor(&user)?, path.into_inner());
    let turn = edit_lock_turn(&state, id).await?;
    let ttl = state.config.edit_lock_ttl;
    let (_, acquired, lock) = state
        .off_executor
        .with_pool(move |pool| editing::open(pool, turn, ttl, id, &owner, Policy::TakeOverExpired))
        .await?;
    Ok(match acquired {
        Acquired::Renewed { .. } => HttpResponse::Ok().json(lock),
        Acquired::New | Acquired::TookOver(_) => HttpResponse::Created().json(lock),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HeartbeatQuery {
    /// The epoch the caller's editor was opened under: 423 once the lock is a later one.
    epoch: Option<i64>,
}

documented_answers!(HeartbeatAnswers:
    ResourceError[NotFound],
    EditLockError[TakenOver, NotHeld, Superseded],
    AuthError[Forbidden]);

/// Heartbeat: extend my lock by the TTL. With `epoch`, a page whose lock was ended and taken
/// again since (by this session, in another tab) learns it: 423 `edit_lock_superseded`.
#[utoipa::path(put, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id"),
           ("epoch" = Option<i64>, Query, description = "The epoch the caller's editor was opened under")),
    responses((status = 200, body = LockView), HeartbeatAnswers))]
pub(super) async fn heartbeat_json(
    user: SessionUser,
    path: web::Path<i64>,
    query: web::Query<HeartbeatQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let owner = editor(&user)?;
    let (ttl, id) = (state.config.edit_lock_ttl, resource_id(path)?);
    let (key, epoch) = (EditLockKey::resource(id), query.epoch);
    let lock =
        state.off_executor.with_conn(move |conn| service::heartbeat(conn, ttl, &key, &owner, epoch)).await?;
    Ok(HttpResponse::Ok().json(lock))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseQuery {
    /// Release only if this is still the lock's last heartbeat (see `service::release`).
    if_heartbeat: Option<chrono::DateTime<chrono::Utc>>,
}

documented_answers!(ReleaseAnswers: EditLockError[Locked], AuthError[Forbidden]);

/// Releases my lock; 204 also when there was none, or when `if_heartbeat` no longer matches
/// (releasing is idempotent). Someone else's lock is never released here: 423.
#[utoipa::path(delete, path = "/api/v1/resources/{id}/edit-lock", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id"),
           ("if_heartbeat" = Option<String>, Query, description = "Release only if this is still the last heartbeat")),
    responses((status = 204), ReleaseAnswers))]
pub(super) async fn release_json(
    user: SessionUser,
    path: web::Path<i64>,
    query: web::Query<ReleaseQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let owner = editor(&user)?;
    let (id, if_heartbeat) = (resource_id(path)?, query.if_heartbeat.map(|t| t.naive_utc()));
    state
        .off_executor
        .with_conn(move |conn| {
            let key = EditLockKey::resource(id);
            service::release(conn, &key, &owner, if_heartbeat, service::BY_ITS_OWNER)
        })
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResourcePatch {
    #[schema(min_length = 1, max_length = 100)]
    name: Option<String>,
    #[schema(max_length = 2000)]
    description: Option<String>,
    #[schema(minimum = 1, maximum = 10000)]
    capacity: Option<i64>,
}

documented_answers!(PatchAnswers:
    ResourceError[NotFound, BadEpoch, Invalid, CapacityBelowBookings, EpochRequired],
    EditLockError[Locked, TakenOver, NotHeld, Superseded],
    AuthError[Forbidden]);

/// Changes a resource; only the holder of its edit lock may, and only under the acquisition named
/// by `Edit-Lock-Epoch` (423 otherwise). The lock is kept.
#[utoipa::path(patch, path = "/api/v1/resources/{id}", tag = "resources", request_body = ResourcePatch,
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id"),
           ("Edit-Lock-Epoch" = i64, Header, description = "The epoch of the edit lock, as acquiring it answered")),
    responses((status = 200, body = Resource), PatchAnswers))]
pub(super) async fn patch_json(
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
    let saved = state
        .off_executor
        .with_conn(move |conn| editing::patch(conn, id, &owner, lock_epoch, &changes))
        .await?;
    Ok(HttpResponse::Ok().json(saved))
}

/// A draft as the editor's script sends it: the form's fields as typed, unvalidated.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DraftRequest {
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

documented_answers!(DraftAnswers: ResourceError[NotFound, NoDraft], AuthError[Forbidden]);

/// My kept draft of this resource (staff): what I typed and did not save, when and why it was kept.
#[utoipa::path(get, path = "/api/v1/resources/{id}/draft", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 200, body = Draft<ResourceInput>), DraftAnswers))]
pub(super) async fn draft_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    let draft = state.off_executor.with_conn(move |conn| editing::draft_of(conn, id, owner.user_id)).await?;
    Ok(HttpResponse::Ok().json(draft))
}

documented_answers!(KeepDraftAnswers: ResourceError[NotFound, Invalid], AuthError[Forbidden]);

/// Keep what I typed in the editor as my draft (staff; the editor's script sends it with its
/// heartbeat, and at once when the lock is lost). Needs no lock: a draft is mine, not the
/// record's. It is offered back when I next open the editor.
#[utoipa::path(put, path = "/api/v1/resources/{id}/draft", tag = "resources", request_body = DraftRequest,
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 204, description = "Kept"), KeepDraftAnswers))]
pub(super) async fn keep_draft_json(
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

documented_answers!(DiscardDraftAnswers: AuthError[Forbidden]);

/// Discard my kept draft of this resource (staff); 204 also when there was none.
#[utoipa::path(delete, path = "/api/v1/resources/{id}/draft", tag = "resources",
    params(("id" = i64, Path, minimum = 1, example = 1, description = "Resource id")),
    responses((status = 204), DiscardDraftAnswers))]
pub(super) async fn discard_draft_json(
    user: SessionUser,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ResourceError> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    state.off_executor.with_conn(move |conn| editing::discard_draft(conn, id, owner.user_id)).await?;
    Ok(HttpResponse::NoContent().finish())
}
