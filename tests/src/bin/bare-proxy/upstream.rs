//! Where each model's requests go, and one client connection's keep-alive connections there.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HOST, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// One upstream: where to connect and its `Host`.
#[derive(Debug)]
struct Upstream {
    host: String,
    port: u16,
    authority: HeaderValue,
}

/// Models and their upstreams, the first one also for any other model.
#[derive(Debug)]
pub(crate) struct Routes(Vec<(String, Upstream)>);

impl Routes {
    /// From `MODEL=http://host:port` texts.
    pub(crate) fn parse(texts: &[String]) -> Result<Routes, String> {
        texts
            .iter()
            .map(|t| route(t))
            .collect::<Result<_, _>>()
            .map(Routes)
    }

    fn index(&self, model: Option<&str>) -> usize {
        model
            .and_then(|m| self.0.iter().position(|(name, _)| name == m))
            .unwrap_or(0)
    }
}

fn route(text: &str) -> Result<(String, Upstream), String> {
    let (model, url) = text
        .split_once('=')
        .ok_or_else(|| format!("--route `{text}`: write it MODEL=URL"))?;
    let uri: Uri = url.parse().map_err(|e| format!("--route `{text}`: {e}"))?;
    let host = match (uri.scheme_str(), uri.host()) {
        (Some("http"), Some(host)) => host.trim_matches(['[', ']']).to_owned(),
        _ => return Err(format!("--route `{text}`: give an http://host:port URL")),
    };
    let port = uri.port_u16().unwrap_or(80);
    let authority = HeaderValue::from_str(&format!("{host}:{port}"))
        .map_err(|e| format!("--route `{text}`: {e}"))?;
    let upstream = Upstream {
        host,
        port,
        authority,
    };
    Ok((model.to_owned(), upstream))
}

/// A client connection's connections to each upstream, opened when first needed.
pub(crate) struct Upstreams {
    routes: Arc<Routes>,
    senders: Vec<Option<SendRequest<Full<Bytes>>>>,
}

impl Upstreams {
    pub(crate) fn new(routes: Arc<Routes>) -> Upstreams {
        let senders = routes.0.iter().map(|_| None).collect();
        Upstreams { routes, senders }
    }

    /// Sends the request (`parts`, `body`) to `model`'s upstream; its answer's head, the body
    /// to be read as it comes.
    pub(crate) async fn send(
        &mut self,
        model: Option<&str>,
        mut parts: Parts,
        body: Bytes,
    ) -> Result<Response<Incoming>, String> {
        let at = self.routes.index(model);
        let upstream = &self.routes.0[at].1;
        parts.headers.insert(HOST, upstream.authority.clone());
        let request = Request::from_parts(parts, Full::new(body));
        let sender = ready(&mut self.senders[at], upstream).await?;
        sender.send_request(request).await.map_err(|e| {
            self.senders[at] = None;
            format!("upstream: {e}")
        })
    }
}

/// The connection in `slot`, opened again if it is missing or closed, once ready.
async fn ready<'a>(
    slot: &'a mut Option<SendRequest<Full<Bytes>>>,
    upstream: &Upstream,
) -> Result<&'a mut SendRequest<Full<Bytes>>, String> {
    if slot.as_ref().is_none_or(|s| s.is_closed()) {
        *slot = Some(connect(upstream).await?);
    }
    let sender = slot.as_mut().ok_or_else(|| "no connection".to_owned())?;
    sender
        .ready()
        .await
        .map_err(|e| format!("upstream connection: {e}"))?;
    Ok(sender)
}

async fn connect(upstream: &Upstream) -> Result<SendRequest<Full<Bytes>>, String> {
    let where_ = format!("{}:{}", upstream.host, upstream.port);
    let tcp = TcpStream::connect((upstream.host.as_str(), upstream.port))
        .await
        .map_err(|e| format!("connect to {where_}: {e}"))?;
    tcp.set_nodelay(true)
        .map_err(|e| format!("connect to {where_}: {e}"))?;
    let (sender, connection) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake with {where_}: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_pick_by_model_and_default_to_the_first() {
        let texts = [
            "now=http://127.0.0.1:1".to_owned(),
            "slow=http://127.0.0.1:2".to_owned(),
        ];
        let routes = Routes::parse(&texts).expect("routes");
        assert_eq!(routes.index(Some("slow")), 1);
        assert_eq!(routes.index(Some("other")), 0);
        assert_eq!(routes.index(None), 0);
        assert!(Routes::parse(&["no-equals".to_owned()]).is_err());
        assert!(Routes::parse(&["m=https://x".to_owned()]).is_err());
    }
}
