//! Receiving stock: the staff form and the API.

use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::InventoryError;
use super::model::Quantity;
use super::service::{self, MovementLine, Received};
use crate::app::{AppState, PageContext, html, see_other};
use crate::auth::csrf::CsrfForm;
use crate::auth::{AuthError, Role, SessionUser};
use crate::catalog::service::{ProductWithStock, list_with_stock};
use crate::wire::answers::documented_answers;

#[derive(utoipa::OpenApi)]
#[openapi(paths(receipt_json))]
pub struct Api;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/stock/receipts", web::get().to(receipts_page))
        .route("/stock/receipts", web::post().to(receipt_form))
        .route("/api/v1/stock/receipts", web::post().to(receipt_json));
}

async fn receive(
    state: &AppState,
    user: &SessionUser,
    product_id: i64,
    quantity: Quantity,
) -> Result<Received, InventoryError> {
    if product_id < 1 {
        return Err(InventoryError::InvalidProductId);
    }
    let turn = state.turn(state.pool().names().stock(product_id)).await?;
    let actor = user.id;
    state.off_executor.with_pool(move |pool| service::receive(pool, turn, actor, product_id, quantity)).await
}

#[derive(Template)]
#[template(path = "inventory/receipts.html")]
struct ReceiptsPage {
    ctx: PageContext,
    products: Vec<ProductWithStock>,
    movements: Vec<MovementLine>,
    received: Option<ReceivedQuery>,
    max_quantity: u32,
}

impl ReceiptsPage {
    /// The product just received, by name: "Kyusu (TEA-01)", or its id if it has gone since.
    fn received_product(&self) -> String {
        let id = self.received.as_ref().and_then(|r| r.product.as_deref()).unwrap_or("?");
        self.products
            .iter()
            .find(|p| p.product.id.to_string() == id)
            .map_or_else(|| format!("product {id}"), |p| format!("{} ({})", p.product.name, p.product.sku))
    }
}

#[derive(Deserialize)]
struct ReceivedQuery {
    product: Option<String>,
    quantity: Option<u32>,
    on_hand: Option<u32>,
}

async fn receipts_page(
    user: SessionUser,
    ctx: PageContext,
    query: web::Query<ReceivedQuery>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    user.require(Role::Staff)?;
    let (products, movements) = state
        .off_executor
        .with_conn(move |conn| -> Result<_, InventoryError> {
            Ok((list_with_stock(conn)?, service::recent_movements(conn, 30)?))
        })
        .await?;
    let received = Some(query.into_inner()).filter(|q| q.product.is_some());
    Ok(html(&ReceiptsPage { ctx, products, movements, received, max_quantity: Quantity::MAX_PER_RECEIPT })?)
}

#[derive(Deserialize)]
struct ReceiptForm {
    product_id: String,
    quantity: String,
}

async fn receipt_form(
    user: SessionUser,
    CsrfForm(form): CsrfForm<ReceiptForm>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    user.require(Role::Staff)?;
    let product_id = form.product_id.trim().parse::<i64>().map_err(|_| InventoryError::InvalidProductId)?;
    let quantity =
        Quantity::parse_text(&form.quantity, Quantity::MAX_PER_RECEIPT).map_err(InventoryError::from)?;
    let received = receive(&state, &user, product_id, quantity).await?;
    Ok(see_other(&format!(
        "/stock/receipts?product={}&quantity={}&on_hand={}",
        received.product_id, received.quantity, received.on_hand
    )))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ReceiptRequest {
    #[schema(minimum = 1)]
    product_id: i64,
    #[schema(minimum = 1, maximum = 100000)]
    quantity: i64,
}

documented_answers!(ReceiptAnswers:
    InventoryError[Quantity, InvalidProductId, UnknownProduct, StockLimit],
    AuthError[Forbidden]);

/// Receive stock (staff): increase-or-insert under the product's named lock.
#[utoipa::path(post, path = "/api/v1/stock/receipts", tag = "stock", request_body = ReceiptRequest,
    responses((status = 201, body = Received), ReceiptAnswers))]
async fn receipt_json(
    user: SessionUser,
    body: web::Json<ReceiptRequest>,
    state: web::Data<AppState>,
) -> actix_web::Result<HttpResponse> {
    user.require(Role::Staff)?;
    let quantity = Quantity::parse(body.quantity, Quantity::MAX_PER_RECEIPT).map_err(InventoryError::from)?;
    let received = receive(&state, &user, body.product_id, quantity).await?;
    Ok(HttpResponse::Created().json(received))
}
