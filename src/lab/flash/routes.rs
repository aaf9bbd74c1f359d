//! Starting a flash sale from `/demo` (the page shows the latest one: `demo/routes.rs`).
//!
//! A logged-in user presses the button; the sale takes the one slot (refused while another runs
//! on any instance, or within the user's cooldown), runs on a thread of its own, and the browser
//! goes back to the page, which shows it running and then its report.
//!
//! From the page the buyers shop at **this instance only**: the lab knows no other instance's
//! address (behind a load balancer it would reach them only by chance). The instance reaches
//! itself at the address the request arrived on. `haita demo flash-sale --base-url … --base-url …`
//! spreads the buyers over several.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use actix_web::{HttpRequest, HttpResponse, web};

use super::{Asked, FlashError, SaleSpec};
use crate::app::{AppState, PageContext, see_other};
use crate::auth::SessionUser;
use crate::auth::csrf::CsrfForm;
use crate::lab::demo::RaceBoard;
use crate::lab::demo::VISITOR_COOLDOWN;
use crate::wire::client_address::ClientAddress;
use crate::wire::error::AsProblem;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/demo/flash-sales", web::post().to(flash_sale_form));
}

/// The standard sale (500 buyers, 50 units, both variants), started by the logged-in user. A
/// demo account (its password is published, so it is anyone's) also waits a visitor's cooldown
/// per client address ([`VISITOR_COOLDOWN`], shared with the address's races): logging in
/// as alice, bob and carol in turn does not start sales back to back.
async fn flash_sale_form(
    user: SessionUser,
    ctx: PageContext,
    req: HttpRequest,
    CsrfForm(_): CsrfForm<Vec<(String, String)>>,
    state: web::Data<AppState>,
    board: web::Data<RaceBoard>,
) -> actix_web::Result<HttpResponse> {
    let spec = SaleSpec::parse(&[this_instance(req.app_config().local_addr())], &Asked::default())?;
    let who = user.username.clone();
    let address = ClientAddress::of_request(&req, &state.config.trusted_proxies).filter(|_| user.is_demo);
    let address_left = address.and_then(|a| board.address_cooldown_left(a, VISITOR_COOLDOWN));
    let taken = match address_left {
        Some(left) => Err(FlashError::CoolingDown(left.as_secs().max(1))),
        None => {
            state.off_executor.with_conn(move |conn| super::take_slot(conn, super::Starter::User(&who))).await
        }
    };
    match taken {
        Ok(slot) => {
            if let Some(address) = address {
                board.started_from(address);
            }
            let (pool, who) = (state.pool().clone(), user.username.clone());
            // A thread of its own, not the blocking pool: the sale runs an async runtime of its
            // own for its buyers, and holds no pooled connection while they shop.
            std::thread::Builder::new()
                .name("flash-sale".into())
                .spawn(move || {
                    if let Err(e) = super::run(&pool, &spec, slot, &who) {
                        log::warn!("the flash sale started by {who} failed: {e}");
                    }
                })
                // The slot went with the closure: its lease frees it (`store::LEASE`).
                .map_err(|e| FlashError::Internal(anyhow::anyhow!("cannot start the sale's thread: {e}")))?;
            Ok(see_other("/demo#flash"))
        }
        Err(refused @ (FlashError::Running(_) | FlashError::CoolingDown(_))) => {
            let ctx = ctx.shown_as("/demo".into());
            crate::lab::demo::routes::page_refusing_flash_sale(ctx, &state, refused.problem()).await
        }
        Err(other) => Err(other.into()),
    }
}

/// This instance's address as the request reached it; a listener on every address (`0.0.0.0`,
/// `::`) is reached on loopback.
fn this_instance(local: SocketAddr) -> String {
    let ip = match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, local.port()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_instance_reaches_itself_where_the_request_arrived_or_on_loopback() {
        let at = |a: &str| super::this_instance(a.parse().expect("address"));
        assert_eq!(at("127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(at("0.0.0.0:8080"), "http://127.0.0.1:8080");
        assert_eq!(at("[::]:8080"), "http://[::1]:8080");
        assert_eq!(at("10.0.0.7:3000"), "http://10.0.0.7:3000");
    }
}
