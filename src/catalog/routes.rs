//! The catalog page (with the order form) and the product list of the API.

use actix_web::{HttpResponse, web};
use askama::Template;

use super::CatalogError;
use super::service::{self, ProductWithStock};
use crate::web::{AppState, PageContext, html};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/products", web::get().to(products_page))
        .route("/api/v1/products", web::get().to(products_json));
}

async fn load(state: &AppState) -> Result<Vec<ProductWithStock>, CatalogError> {
    let pool = state.pool.clone();
    web::block(move || Ok(service::list_with_stock(&mut *pool.get()?)?)).await?
}

#[derive(Template)]
#[template(path = "catalog/products.html")]
struct ProductsPage {
    ctx: PageContext,
    products: Vec<ProductWithStock>,
    max_quantity: u32,
}

async fn products_page(ctx: PageContext, state: web::Data<AppState>) -> actix_web::Result<HttpResponse> {
    let products = load(&state).await?;
    Ok(html(&ProductsPage { ctx, products, max_quantity: crate::inventory::model::Quantity::MAX_PER_LINE })?)
}

async fn products_json(state: web::Data<AppState>) -> Result<HttpResponse, CatalogError> {
    Ok(HttpResponse::Ok().json(load(&state).await?))
}
