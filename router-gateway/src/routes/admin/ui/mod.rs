//! `GET /ui`: the live dashboard, one page whose files are built into the binary (no CDN, no
//! build step): `index.html`, `app.css` and the scripts, which read `/admin/v1` every 5 s. A
//! browser signs in with HTTP Basic: any user name, an admin key as the password; it then sends
//! those credentials with the page's own requests. Without them, or with an unknown key, 401
//! asks for them (`WWW-Authenticate: Basic`); a tenant's key gets 403.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::app::Shared;
use crate::reload::Live;
use crate::routes::wrong_method;

/// One file of the page.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// The page's files, at their paths.
const ASSETS: &[Asset] = &[
    Asset {
        path: "/ui",
        content_type: "text/html; charset=utf-8",
        body: include_str!("index.html"),
    },
    Asset {
        path: "/ui/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("app.css"),
    },
    Asset {
        path: "/ui/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("app.js"),
    },
    Asset {
        path: "/ui/render.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("render.js"),
    },
    Asset {
        path: "/ui/charts.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("charts.js"),
    },
    Asset {
        path: "/ui/favicon.svg",
        content_type: "image/svg+xml",
        body: include_str!("favicon.svg"),
    },
    Asset {
        path: "/ui/keys.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("keys.js"),
    },
];

/// The realm the browser shows when it asks for credentials.
const CHALLENGE: &str = "Basic realm=\"llmroute admin\", charset=\"UTF-8\"";

/// The dashboard's routes.
pub(super) fn routes() -> axum::Router<Arc<crate::reload::Gateway>> {
    let mut router = axum::Router::new();
    for asset in ASSETS {
        let handler = move |Live(shared): Live, headers: HeaderMap| async move {
            serve(&shared, &headers, asset)
        };
        router = router.route(asset.path, get(handler).fallback(wrong_method("GET")));
    }
    // `/ui/` is the same page; its relative links would resolve under it, so send it to `/ui`.
    router.route(
        "/ui/",
        get(|| async {
            (
                StatusCode::PERMANENT_REDIRECT,
                [(header::LOCATION, "/ui")],
                "the dashboard is at /ui\n",
            )
        }),
    )
}

/// `asset` to an admin; a one-line refusal to anyone else.
fn serve(shared: &Shared, headers: &HeaderMap, asset: &Asset) -> Response {
    let mut response = match shared.access.admin(headers) {
        Ok(_) => ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response(),
        Err(e) if e.status() == StatusCode::FORBIDDEN => (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "this is a tenant's key: the dashboard needs an admin key (gateway.admin_keys or \
             LLMROUTE_ADMIN_KEY); close the browser window to sign in again\n",
        )
            .into_response(),
        Err(_) => (
            StatusCode::UNAUTHORIZED,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::WWW_AUTHENTICATE, CHALLENGE),
            ],
            "sign in with any user name and an admin key (gateway.admin_keys or \
             LLMROUTE_ADMIN_KEY) as the password\n",
        )
            .into_response(),
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, "default-src 'self'"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
