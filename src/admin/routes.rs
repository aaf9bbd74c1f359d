//! HTTP for the admin screens (`/admin/locks`, `/admin/audit`) and the same data and actions
//! under `/api/v1/admin/…`. Every handler takes [`Admin`]: 401 anonymous, 403 other roles.

use actix_web::{HttpResponse, web};
use askama::Template;
use serde::{Deserialize, Serialize};

use super::named_locks::{self, Killed, Listing, NamedLock, OurLockName};
use super::{Admin, AdminError, Reason};
use crate::app::{AppState, PageContext, html, see_other};
use crate::audit::{self, AuditPage};
use crate::auth::csrf::{CsrfForm, TokenOnly};
use crate::batch::forms::{CLOSURE_ACTION, ClosureForm, REVISION_ACTION, RevisionForm};
use crate::edit_locks::{self, EditLockError, EditLockKey, LockView};
use crate::i18n::Lang;
use crate::infra::Infra;
use crate::wire::answers::documented_answers;

#[derive(utoipa::OpenApi)]
#[openapi(paths(
    locks_json,
    release_expired_json,
    force_release_edit_json,
    lookup_named_json,
    force_release_named_json,
    audit_json
))]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/locks", web::get().to(locks_page))
        .route("/admin/edit-locks/force-release", web::post().to(force_release_edit_form))
        .route("/admin/edit-locks/release-expired", web::post().to(release_expired_form))
        .route("/admin/named-locks/force-release", web::post().to(force_release_named_form))
        .route("/admin/audit", web::get().to(audit_page))
        .route("/admin/metrics", web::get().to(metrics_page))
        .route(REVISION_ACTION, web::post().to(start_revision_form))
        .route(CLOSURE_ACTION, web::post().to(start_closure_form))
        .route("/admin/batch-runs/{id}", web::get().to(batch_run_row))
        .route("/static/batch_runs.js", web::get().to(batch_runs_script))
        .route("/api/v1/admin/locks", web::get().to(locks_json))
        .route("/api/v1/admin/edit-locks/release-expired", web::post().to(release_expired_json))
        .route("/api/v1/admin/edit-locks/{key}", web::delete().to(force_release_edit_json))
        .service(
            web::resource("/api/v1/admin/named-locks/{name}")
                .route(web::get().to(lookup_named_json))
                .route(web::delete().to(force_release_named_json)),
        )
        .route("/api/v1/admin/audit", web::get().to(audit_json));
}

/// Everything the locks screen and `GET /api/v1/admin/locks` show.
#[derive(Serialize, utoipa::ToSchema)]
struct Locks {
    edit_locks: Vec<AdminEditLock>,
    named_locks: Listing,
    /// The latest deadlocks this application's transactions lost, newest first.
    deadlocks: Vec<crate::deadlocks::Report>,
    /// The latest batch runs, newest first, with their progress.
    batch_runs: Vec<crate::batch::runs::Run>,
}

/// How many batch runs the screen shows.
const RUNS_SHOWN: i64 = 10;

/// How many deadlock reports the screen shows.
const DEADLOCKS_SHOWN: i64 = 10;

/// An edit lock as the admin sees it: with the owner's session (its first characters).
#[derive(Serialize, utoipa::ToSchema)]
struct AdminEditLock {
    #[serde(flatten)]
    lock: LockView,
    session: String,
}

async fn load_locks(state: &AppState) -> Result<Locks, AdminError> {
    let names = state.pool().names().clone();
    state
        .off_executor
        .with_conn(move |conn| {
            let edit_locks = edit_locks::service::list(conn)?
                .into_iter()
                .map(|lock| AdminEditLock { session: lock.session_hint().to_string(), lock })
                .collect();
            let named_locks = named_locks::list(conn, &names)?;
            let deadlocks = crate::deadlocks::recent(conn, DEADLOCKS_SHOWN)?;
            let batch_runs = crate::batch::runs::recent(conn, RUNS_SHOWN)?;
            Ok(Locks { edit_locks, named_locks, deadlocks, batch_runs })
        })
        .await
}

// ---- HTML -------------------------------------------------------------------------------

#[derive(Template)]
#[template(path = "admin/locks.html")]
struct LocksPage {
    ctx: PageContext,
    locks: Locks,
    lookup: Option<(String, Option<NamedLock>)>,
    done: Option<String>,
}

impl LocksPage {
    /// What the named-lock listing cannot show on this server, in the page's language.
    fn listing_gap(&self) -> Option<String> {
        let key = match self.locks.named_locks.gap? {
            "mariadb_plugin" => "admin.named_locks.gap.mariadb_plugin",
            "mysql_performance_schema" => "admin.named_locks.gap.mysql_performance_schema",
            _ => "admin.named_locks.gap.advisory_keys",
        };
        Some(self.ctx.lang.t(key).into_owned())
    }

    /// "4 min 12 s" ("4 分 12 秒"): ages and remaining times for a person, in the page's language.
    /// Takes `i64` or `&i64`: askama passes loop fields by reference.
    fn human(&self, secs: impl std::borrow::Borrow<i64>) -> String {
        let secs = *secs.borrow();
        let sign = if secs < 0 { "−" } else { "" };
        let secs = secs.unsigned_abs();
        let (key, args): (&str, Vec<(&str, u64)>) = match secs {
            0..60 => ("admin.secs", vec![("s", secs)]),
            60..3600 => ("admin.mins", vec![("m", secs / 60), ("s", secs % 60)]),
            _ => ("admin.hours", vec![("h", secs / 3600), ("m", secs % 3600 / 60)]),
        };
        let args: Vec<(&str, String)> = args.into_iter().map(|(name, n)| (name, n.to_string())).collect();
        format!("{sign}{}", self.ctx.lang.t_with(key, args))
    }
}

/// One batch run's row of the locks page, alone: what the page's script swaps in while the run
/// is going, so that the row moves and nothing else on the page is touched.
#[derive(Template)]
#[template(path = "admin/batch_run.html")]
struct BatchRunRow {
    ctx: PageContext,
    run: crate::batch::runs::Run,
}

async fn batch_run_row(
    Admin(_): Admin,
    ctx: PageContext,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let id = path.into_inner();
    let run = state
        .off_executor
        .with_conn(move |conn| Ok::<_, AdminError>(crate::batch::runs::one(conn, id)?))
        .await?;
    let run = run.ok_or(crate::wire::error::RequestError::NotFound)?;
    Ok(html(&BatchRunRow { ctx, run })?)
}

/// Keeps the rows of running batch runs current ([`batch_run_row`]).
async fn batch_runs_script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(include_str!("../../static/batch_runs.js"))
}

#[derive(Deserialize)]
struct LocksQuery {
    /// A named lock to look up with IS_USED_LOCK.
    name: Option<String>,
    released: Option<String>,
    expired: Option<u32>,
    killed: Option<i64>,
    freed: Option<bool>,
    started: Option<i64>,
}

impl LocksQuery {
    /// The confirmation of the action just done, rebuilt from typed values only (never echoing
    /// free text from the URL).
    fn done(&self, lang: Lang) -> Option<String> {
        if let Some(key) = self.released.as_deref().and_then(|k| EditLockKey::parse(k).ok()) {
            return Some(lang.t_with("admin.done.released", [("key", key.to_string())]));
        }
        if let Some(n) = self.expired {
            return Some(lang.t_with("admin.done.expired", [("n", n.to_string())]));
        }
        if let Some(run) = self.started {
            return Some(lang.t_with("admin.done.started", [("run", run.to_string())]));
        }
        self.killed.map(|id| match self.freed {
            Some(false) => lang.t_with("admin.done.killed_not_free", [("id", id.to_string())]),
            _ => lang.t_with("admin.done.killed", [("id", id.to_string())]),
        })
    }
}

async fn locks_page(
    Admin(_): Admin,
    ctx: PageContext,
    query: web::Query<LocksQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let locks = load_locks(&state).await?;
    let lookup = match query.name.as_deref().filter(|n| !n.trim().is_empty()) {
        Some(text) => {
            let name = OurLockName::parse(state.pool().names(), state.pool().dialect(), text)?;
            let found = state
                .off_executor
                .with_conn(move |conn| Ok::<_, AdminError>(named_locks::lookup(conn, &name)?))
                .await?;
            Some((text.trim().to_string(), found))
        }
        None => None,
    };
    let done = query.done(ctx.lang);
    Ok(html(&LocksPage { ctx, locks, lookup, done })?)
}

#[derive(Deserialize)]
struct ForceReleaseEditForm {
    key: String,
    reason: Option<String>,
    /// `editor`: sent from the "someone is editing" screen of the record itself, so the admin is
    /// taken on to its editor (which takes the lock for them) instead of back to the locks page.
    then: Option<String>,
}

async fn force_release_edit_form(
    Admin(admin): Admin,
    CsrfForm(form): CsrfForm<ForceReleaseEditForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let key = EditLockKey::parse(&form.key).map_err(AdminError::from)?;
    let reason = Reason::parse(form.reason.as_deref())?;
    let editor = form.then.as_deref() == Some("editor");
    let resource = key.resource_id();
    let released = force_release_edit(&state, key, admin.id, reason).await?;
    match resource {
        Some(id) if editor => Ok(see_other(&format!("/resources/{id}/edit"))),
        _ => Ok(see_other(&format!("/admin/locks?released={}", released.key))),
    }
}

async fn force_release_edit(
    state: &AppState,
    key: EditLockKey,
    admin_id: i64,
    reason: Reason,
) -> Result<LockView, AdminError> {
    state
        .off_executor
        .with_conn(move |conn| Ok(edit_locks::admin::force_release(conn, &key, admin_id, reason.as_str())?))
        .await
}

async fn release_expired(state: &AppState, admin_id: i64) -> Result<Vec<LockView>, AdminError> {
    state.off_executor.with_conn(move |conn| Ok(edit_locks::admin::release_expired(conn, admin_id)?)).await
}

async fn release_expired_form(
    Admin(admin): Admin,
    CsrfForm(_): CsrfForm<TokenOnly>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let released = release_expired(&state, admin.id).await?;
    Ok(see_other(&format!("/admin/locks?expired={}", released.len())))
}

#[derive(Deserialize)]
struct ForceReleaseNamedForm {
    name: String,
    connection_id: Option<i64>,
    reason: Option<String>,
}

async fn force_release_named(
    state: &AppState,
    name: OurLockName,
    expected: Option<i64>,
    admin_id: i64,
    reason: Reason,
) -> Result<Killed, AdminError> {
    state
        .off_executor
        .with_conn(move |conn| named_locks::force_release(conn, &name, expected, admin_id, reason.as_str()))
        .await
}

async fn force_release_named_form(
    Admin(admin): Admin,
    CsrfForm(form): CsrfForm<ForceReleaseNamedForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let name = OurLockName::parse(state.pool().names(), state.pool().dialect(), &form.name)?;
    let reason = Reason::parse(form.reason.as_deref())?;
    let killed = force_release_named(&state, name, form.connection_id, admin.id, reason).await?;
    Ok(see_other(&format!("/admin/locks?killed={}&freed={}", killed.connection_id, killed.freed)))
}

#[derive(Template)]
#[template(path = "admin/audit.html")]
struct AuditScreen {
    ctx: PageContext,
    page: AuditPage,
}

#[derive(Deserialize)]
struct AuditQuery {
    before: Option<i64>,
    limit: Option<i64>,
}

const AUDIT_PAGE: i64 = 50;

async fn load_audit(state: &AppState, query: &AuditQuery) -> Result<AuditPage, AdminError> {
    let (before, limit) = (query.before, query.limit.unwrap_or(AUDIT_PAGE));
    if before.is_some_and(|id| id < 1) {
        return Err(AdminError::OutOfRange { field: "before", range: "an event id, 1 or more".into() });
    }
    if !(1..=audit::MAX_PAGE).contains(&limit) {
        return Err(AdminError::OutOfRange { field: "limit", range: format!("1 to {}", audit::MAX_PAGE) });
    }
    state.off_executor.with_conn(move |conn| Ok(audit::page(conn, before, limit)?)).await
}

async fn audit_page(
    Admin(_): Admin,
    ctx: PageContext,
    query: web::Query<AuditQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let page = load_audit(&state, &query).await?;
    Ok(html(&AuditScreen { ctx, page })?)
}

/// Starts a price revision on this instance ([`start_in_background`]).
async fn start_revision_form(
    Admin(_): Admin,
    CsrfForm(form): CsrfForm<RevisionForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let revision = form.into_revision(state.config.batch_lock().report_dir())?;
    start_in_background(&state, revision).await
}

/// Starts a maintenance closure made by this admin, like [`start_revision_form`].
async fn start_closure_form(
    Admin(admin): Admin,
    CsrfForm(form): CsrfForm<ClosureForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    let closure = form.into_closure(admin.id, state.config.batch_lock().report_dir())?;
    start_in_background(&state, closure).await
}

/// Takes the job's guard and records the run before answering (so "already running" is said
/// here); the work then goes on in a thread of its own — never on the executor — and shows on
/// the locks screen as it progresses.
async fn start_in_background<J: crate::batch::Job>(
    state: &AppState,
    job: J,
) -> actix_web::Result<HttpResponse> {
    let lock = state.config.batch_lock();
    let started = state.off_executor.with_pool(move |pool| crate::batch::start(pool, &lock, &job)).await?;
    let run_id = started.run_id;
    std::thread::Builder::new()
        .name(format!("batch-run-{run_id}"))
        .spawn(move || {
            if let Err(e) = started.finish() {
                log::warn!("batch run {run_id} ended early: {e}");
            }
        })
        .map_err(|e| crate::wire::error::RequestError::Internal(e.into()))?;
    Ok(see_other(&format!("/admin/locks?started={run_id}#batch")))
}

#[derive(Template)]
#[template(path = "admin/metrics.html")]
struct MetricsScreen {
    ctx: PageContext,
    charts: super::metrics::Charts,
    bar_max: u32,
    row_width: u32,
    /// The instance that serves the page.
    instance: web::Data<super::instances::Instance>,
    /// Every instance on the database, or `None` when the database could not be read.
    instances: Option<Vec<super::instances::Listed>>,
    /// The key numbers' columns: each one's name and its words.
    columns: Vec<(&'static str, String)>,
    /// Their sums over the live instances, with the columns' names and words.
    totals: Vec<(&'static str, String, String)>,
    live: usize,
}

/// This instance's lock metrics, drawn from its memory; above them, every instance on the
/// database with its key numbers (one read of `app_instances`). The charts do not need the
/// database: while it is away they are shown still, and the list says it could not be read.
async fn metrics_page(
    Admin(_): Admin,
    ctx: PageContext,
    state: web::Data<AppState>,
    instance: web::Data<super::instances::Instance>,
) -> actix_web::Result<HttpResponse> {
    let charts = super::metrics::charts(&state.metrics.gather(state.pool().state()), ctx.lang);
    let buckets = charts.waits.first().or(charts.holds.first()).map_or(15, |s| s.buckets.len());
    let row_width = u32::try_from(buckets).unwrap_or(15) * (super::metrics::BAR_WIDTH + 2);
    let this = instance.id.clone();
    let instances = state
        .off_executor
        .with_conn(move |conn| super::instances::list(conn, &this).map_err(Infra::from))
        .await
        .map_err(|e| log::warn!("listing the instances failed: {e}"))
        .ok();
    let columns: Vec<(&'static str, String)> = super::instances::KEY_METRICS
        .iter()
        .map(|&name| (name, ctx.lang.t(&format!("admin.metrics.count.{name}")).into_owned()))
        .collect();
    let listed = instances.as_deref().unwrap_or_default();
    let totals = columns
        .iter()
        .zip(super::instances::totals(listed))
        .map(|((name, words), total)| (*name, words.clone(), total))
        .collect();
    let live = listed.iter().filter(|i| i.live).count();
    Ok(html(&MetricsScreen {
        ctx,
        charts,
        bar_max: super::metrics::BAR_MAX,
        row_width,
        instance,
        instances,
        columns,
        totals,
        live,
    })?)
}

// ---- JSON -------------------------------------------------------------------------------

/// Every edit lock and every live named lock of this application (admin).
#[utoipa::path(get, path = "/api/v1/admin/locks", tag = "admin",
    responses((status = 200, body = Locks)))]
async fn locks_json(Admin(_): Admin, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    Ok(HttpResponse::Ok().json(load_locks(&state).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonQuery {
    reason: Option<String>,
    connection_id: Option<i64>,
}

#[derive(Serialize)]
struct Released<T> {
    released: T,
}

documented_answers!(ReleaseEditAnswers:
    EditLockError[InvalidKey, NoSuchLock, BatchHeld],
    AdminError[InvalidReason]);

/// `DELETE /api/v1/admin/edit-locks/{key}?reason=…`
#[utoipa::path(delete, path = "/api/v1/admin/edit-locks/{key}", tag = "admin",
    params(("key" = String, Path, description = "e.g. resource:42"),
           ("reason" = String, Query, min_length = 3, max_length = 300, description = "Written to the audit log")),
    responses((status = 200, description = "`{\"released\": LockView}`"), ReleaseEditAnswers))]
async fn force_release_edit_json(
    Admin(admin): Admin,
    path: web::Path<String>,
    query: web::Query<ReasonQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let key = EditLockKey::parse(&path.into_inner())?;
    let reason = Reason::parse(query.reason.as_deref())?;
    let released = force_release_edit(&state, key, admin.id, reason).await?;
    Ok(HttpResponse::Ok().json(Released { released }))
}

/// Release every expired edit lock (batch-held ones excepted).
#[utoipa::path(post, path = "/api/v1/admin/edit-locks/release-expired", tag = "admin",
    responses((status = 200, description = "`{\"released\": [LockView]}`")))]
async fn release_expired_json(
    Admin(admin): Admin,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let released = release_expired(&state, admin.id).await?;
    Ok(HttpResponse::Ok().json(Released { released }))
}

documented_answers!(LookUpNamedAnswers: AdminError[NotOurs, NotHeld]);

/// `GET /api/v1/admin/named-locks/{name}`: who holds it (IS_USED_LOCK), 404 when nobody.
#[utoipa::path(get, path = "/api/v1/admin/named-locks/{name}", tag = "admin",
    params(("name" = String, Path, description = "A lock name of this deployment (haita:{tag}:…)")),
    responses((status = 200, body = NamedLock), LookUpNamedAnswers))]
async fn lookup_named_json(
    Admin(_): Admin,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let name = OurLockName::parse(state.pool().names(), state.pool().dialect(), &path.into_inner())?;
    let key = name.as_str().to_string();
    let found = state
        .off_executor
        .with_conn(move |conn| Ok::<_, AdminError>(named_locks::lookup(conn, &name)?))
        .await?;
    Ok(HttpResponse::Ok().json(found.ok_or(AdminError::NotHeld(key))?))
}

documented_answers!(ReleaseNamedAnswers:
    AdminError[NotOurs, InvalidReason, NotHeld, HolderChanged, OwnConnection, NotOurSession, KillRefused]);

/// `DELETE /api/v1/admin/named-locks/{name}?reason=…&connection_id=…` — `connection_id`, when
/// given, must still be the holder.
#[utoipa::path(delete, path = "/api/v1/admin/named-locks/{name}", tag = "admin",
    params(("name" = String, Path, description = "A lock name of this deployment (haita:{tag}:…)"),
           ("reason" = String, Query, min_length = 3, max_length = 300, description = "Written to the audit log"),
           ("connection_id" = Option<i64>, Query, minimum = 1, description = "The holder the admin saw; must still hold it")),
    responses((status = 200, description = "`{\"released\": Killed}`"), ReleaseNamedAnswers))]
async fn force_release_named_json(
    Admin(admin): Admin,
    path: web::Path<String>,
    query: web::Query<ReasonQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let name = OurLockName::parse(state.pool().names(), state.pool().dialect(), &path.into_inner())?;
    let reason = Reason::parse(query.reason.as_deref())?;
    let killed = force_release_named(&state, name, query.connection_id, admin.id, reason).await?;
    Ok(HttpResponse::Ok().json(Released { released: killed }))
}

documented_answers!(AuditAnswers: AdminError[OutOfRange]);

/// The audit log, newest first; pass `older` as `before` for the next page.
#[utoipa::path(get, path = "/api/v1/admin/audit", tag = "admin",
    params(("before" = Option<i64>, Query, minimum = 1, description = "The id of the oldest event seen"),
           ("limit" = Option<i64>, Query, minimum = 1, maximum = 200, description = "1 to 200")),
    responses((status = 200, body = AuditPage), AuditAnswers))]
async fn audit_json(
    Admin(_): Admin,
    query: web::Query<AuditQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    Ok(HttpResponse::Ok().json(load_audit(&state, &query).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page a server that cannot list named locks gives, in `lang`.
    fn unlisted_page(lang: Lang) -> String {
        let ctx = PageContext {
            user: None,
            csrf_token: "token".into(),
            demo: false,
            path: "/admin/locks".into(),
            here: "/admin/locks".into(),
            lang,
        };
        let named_locks = Listing {
            prefix: "haita:abc123:".into(),
            source: "unavailable",
            note: Some("Unknown table 'METADATA_LOCK_INFO' in information_schema".into()),
            gap: Some("mariadb_plugin"),
            locks: Vec::new(),
        };
        let locks =
            Locks { edit_locks: Vec::new(), named_locks, deadlocks: Vec::new(), batch_runs: Vec::new() };
        LocksPage { ctx, locks, lookup: None, done: None }.render().expect("rendered")
    }

    /// Issue 34, item 6: where the server cannot list named locks, the page says so in a sentence
    /// in the reader's language — what cannot be shown and why — never the server's error.
    #[test]
    fn a_server_that_cannot_list_named_locks_is_explained_in_the_readers_language() {
        for lang in [Lang::En, Lang::Ja] {
            let page = unlisted_page(lang);
            let sentence = crate::i18n::escape_html(&lang.t("admin.named_locks.gap.mariadb_plugin"));
            assert!(page.contains(&sentence), "{lang:?}: the sentence is on the page");
            assert!(
                page.contains("class=\"flash warn\" id=\"named-locks-note\""),
                "{lang:?}: a note, not an error"
            );
            assert!(!page.contains("Unknown table"), "{lang:?}: the server's error stays in the log");
        }
        assert!(unlisted_page(Lang::Ja).contains("プラグイン"), "in Japanese");
    }
}
