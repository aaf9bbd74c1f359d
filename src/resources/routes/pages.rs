//! The pages: the list, the editor and the pages around it, the save form, the lock's script.

use super::*;

#[derive(Template)]
#[template(path = "resources/list.html")]
pub(super) struct ListPage {
    ctx: PageContext,
    resources: Vec<Resource>,
}

pub(super) async fn list_page(
    ctx: PageContext,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let resources = all_resources(&state).await?;
    Ok(html(&ListPage { ctx, resources })?)
}

#[derive(Template)]
#[template(path = "resources/edit.html")]
pub(super) struct EditPage {
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
        crate::wire::input::field_marks(field, &in_error)
    }
}

/// Shown to everyone who does not hold the lock — and to a holder whose save was refused, with
/// their input (`unsaved`) so nothing they typed is lost.
#[derive(Template)]
#[template(path = "resources/locked.html")]
pub(super) struct LockedPage {
    ctx: PageContext,
    resource: Resource,
    /// Who holds it now; `None` when nobody does (expired and removed, or force-released).
    lock: Option<LockView>,
    /// Why a save was refused: how the saver's lock ended, told to them; `None` when the page
    /// was merely opened.
    refused: Option<Ending>,
    unsaved: Option<ResourceInput>,
    /// The viewer's kept draft of this resource, if any: it waits for them.
    draft: Option<Draft<ResourceInput>>,
    /// The lock is the viewer's own, in another session (another browser): "continue here".
    mine_elsewhere: bool,
}

impl LockedPage {
    fn new(ctx: PageContext, resource: Resource, lock: Option<LockView>) -> Self {
        let viewer = ctx.user.as_ref().map(|u| u.id);
        let mine_elsewhere =
            lock.as_ref().is_some_and(|l| Some(l.owner_user_id) == viewer && !l.held_by_batch);
        Self { ctx, resource, lock, refused: None, unsaved: None, draft: None, mine_elsewhere }
    }

    /// Who holds the lock, as markup: its times are written the pages' one way.
    fn describe(&self) -> Option<String> {
        self.lock.as_ref().map(|lock| crate::edit_locks::describe_html(lock, self.ctx.lang))
    }

    /// "You are editing this in another browser since …", its time in the reader's zone.
    fn mine_elsewhere_html(&self) -> String {
        let since = self.lock.as_ref().map(|l| crate::wire::utc::clock(&l.acquired_at).to_string());
        self.ctx.lang.t_with("locked.mine_elsewhere_html", [("since", since.unwrap_or_default())])
    }

    /// Offer an admin to force-release the lock here, as on the locks page (a reason, audited),
    /// and edit: someone else holds it, live, and it is not a batch's (a batch's lock is never
    /// force-released; it ends with its run).
    fn can_force_release(&self) -> bool {
        self.ctx.is_admin()
            && !self.mine_elsewhere
            && self.lock.as_ref().is_some_and(|l| !l.expired && !l.held_by_batch)
    }

    /// Offer to take the lock: nobody holds it, or the holder's lock expired (not a batch's);
    /// the viewer's own lock in another session is "continue here" instead.
    fn can_take_over(&self) -> bool {
        !self.mine_elsewhere && self.lock.as_ref().is_none_or(|l| l.expired && !l.held_by_batch)
    }
}

/// What the editor page shows in place once its heartbeat is refused: how the lock ended, in a
/// sentence, and the actions that can work (`static/edit_lock.js` fetches it).
#[derive(Template)]
#[template(path = "resources/ended.html")]
pub(super) struct EndedPart {
    ctx: PageContext,
    resource_id: i64,
    ending: Ending,
}

pub(super) fn with_status(
    response: Result<HttpResponse, crate::wire::error::RequestError>,
    status: StatusCode,
) -> actix_web::Result<HttpResponse> {
    let mut response = response?;
    *response.status_mut() = status;
    Ok(response)
}

pub(super) fn values_of(resource: &Resource) -> ResourceInput {
    ResourceInput {
        name: Some(resource.name.clone()),
        description: Some(resource.description.clone()),
        capacity: Some(resource.capacity.to_string()),
    }
}

pub(super) fn heartbeat_ms(state: &AppState) -> u128 {
    // Three heartbeats per lifetime at least, so one lost request does not lose the lock; and
    // one every 15 s at most apart, so a page whose lock was taken learns it within 15 s.
    (state.config.edit_lock_ttl.as_millis() / 3).clamp(500, 15_000)
}

pub(super) async fn open(
    state: &AppState,
    user: &SessionUser,
    id: i64,
    policy: Policy,
) -> Result<Opened, ResourceError> {
    let owner = editor(user)?;
    let turn = edit_lock_turn(state, id).await?;
    let ttl = state.config.edit_lock_ttl;
    state.off_executor.with_pool(move |pool| editing::open_editor(pool, turn, ttl, id, &owner, policy)).await
}

/// `input`: unsaved input to put in the editor instead of the stored values (carried by a
/// take-over, or a restored draft).
pub(super) fn render_opened(
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
            html(&LockedPage { unsaved: input, draft, ..LockedPage::new(ctx, resource, Some(*lock)) }),
            StatusCode::LOCKED,
        ),
    }
}

/// The page before the editor: it shows what opening the editor means and takes the lock with a
/// POST (by script as it loads, or its button).
#[derive(Template)]
#[template(path = "resources/start.html")]
pub(super) struct StartPage {
    ctx: PageContext,
    resource: Resource,
}

#[derive(Deserialize)]
pub(super) struct EditQuery {
    /// `restore`: open the editor with the kept draft in the form.
    draft: Option<String>,
}

/// The editor, when this session holds the lock; someone else's lock (even an expired one, with
/// a take-over button) when they do; else the page that takes the lock. A GET changes nothing:
/// a link, a prefetch or a preview must not lock a resource in a staff member's name.
pub(super) async fn edit_page(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<EditQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, path.into_inner());
    let user_id = owner.user_id;
    let editing::EditorState { resource, lock, draft } =
        state.off_executor.with_conn(move |conn| editing::editor_state(conn, id, user_id)).await?;
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
pub(super) struct ViewPage {
    ctx: PageContext,
    resource: Resource,
    lock: Option<LockView>,
    /// Days it is closed from today on, and why (`closures`).
    closed: Vec<(chrono::NaiveDate, String)>,
    /// Arrived from "Keep my changes as my draft".
    draft_kept: bool,
}

#[derive(Deserialize)]
pub(super) struct ViewQuery {
    draft: Option<String>,
}

pub(super) async fn view_page(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<ViewQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    editor(&user)?;
    let id = resource_id(path)?;
    let editing::ResourceView { resource, lock, closed } =
        state.off_executor.with_conn(move |conn| editing::view(conn, id)).await?;
    Ok(html(&ViewPage { ctx, resource, lock, closed, draft_kept: query.draft.as_deref() == Some("kept") })?)
}

/// Keep what I typed on the page of a refused save as my draft, whoever holds the lock now;
/// then the resource as stored, read-only.
pub(super) async fn keep_draft_form(
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
pub(super) async fn discard_draft_form(
    user: SessionUser,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    state.off_executor.with_conn(move |conn| editing::discard_draft(conn, id, owner.user_id)).await?;
    Ok(see_other(&format!("/resources/{id}/edit")))
}

/// Start editing: take the lock when it is free (or renew ours) and open the editor; someone
/// else's lock, even an expired one, is shown instead (taking that over is its own button).
pub(super) async fn start_form(
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
pub(super) async fn take_over_form(
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

/// "Continue here": take this user's own lock from their other session (another browser, one
/// left open before logging in again) at once — an audited acquisition with a new fencing epoch,
/// so the other page can no longer save. Their text comes along: what this form carries (the
/// displaced page's fields, or a refused save's), else the draft the other page kept.
pub(super) async fn continue_here_form(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    CsrfForm(input): CsrfForm<ResourceInput>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    let carried = input.name.is_some() || input.description.is_some() || input.capacity.is_some();
    match open(&state, &user, id, Policy::ContinueHere).await? {
        Opened::Editing(resource, lock, draft) => {
            let text = if carried { Some(input) } else { draft.as_ref().map(|d| d.fields.clone()) };
            match text {
                Some(text) => render_opened(ctx, &state, Opened::Editing(resource, lock, draft), Some(text)),
                None => Ok(see_other(&format!("/resources/{id}/edit"))),
            }
        }
        opened => render_opened(ctx, &state, opened, carried.then_some(input)),
    }
}

#[derive(Deserialize)]
pub(super) struct EndedQuery {
    /// The epoch the asking page was opened under.
    epoch: Option<i64>,
}

/// How the asking page's lock ended, as a piece of its page: the editor's script puts it in
/// place of the form's buttons once the heartbeat is refused. Reads, changes nothing.
pub(super) async fn ended_part(
    user: SessionUser,
    ctx: PageContext,
    path: web::Path<i64>,
    query: web::Query<EndedQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, resource_id(path)?);
    let epoch = query.epoch;
    let ending =
        state.off_executor.with_conn(move |conn| editing::ending_of(conn, id, &owner, epoch)).await?;
    Ok(html(&EndedPart { ctx, resource_id: id, ending })?)
}

/// Cancel: release my lock (if I still hold it) and go back to the resource.
pub(super) async fn cancel_form(
    user: SessionUser,
    path: web::Path<i64>,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let (owner, id) = (editor(&user)?, path.into_inner());
    state.off_executor.with_conn(move |conn| editing::cancel(conn, id, &owner)).await?;
    Ok(see_other(&format!("/resources/{id}")))
}

/// The editor's fields, and the epoch of the lock it was opened under (a hidden field).
#[derive(Deserialize)]
pub(super) struct SaveForm {
    #[serde(flatten)]
    input: ResourceInput,
    lock_epoch: Option<String>,
}

/// Save: only while holding the lock the editor was opened under (checked in the save's own
/// transaction). A refused save shows the user what they typed, and why it was refused.
pub(super) async fn save_form(
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
    let saved = state
        .off_executor
        .with_conn(move |conn| editing::save_form(conn, id, &saver, lock_epoch, &submitted))
        .await?;
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
        FormSaved::Refused { resource, ending } => {
            // The input is kept as a draft by the refusal itself (`editing::save_form`).
            let page =
                LockedPage { unsaved: Some(input), ..LockedPage::new(ctx, resource, ending.holder.clone()) };
            with_status(html(&LockedPage { refused: Some(ending), ..page }), StatusCode::LOCKED)
        }
    }
}

/// The heartbeat and release-on-leave script of the edit page.
pub(super) async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(include_str!("../../../static/edit_lock.js"))
}
