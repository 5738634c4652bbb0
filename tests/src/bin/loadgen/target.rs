//! Where requests go and what they carry: the URL, the body and the extra headers.

use bytes::Bytes;
use hyper::Uri;
use hyper::header::{HeaderName, HeaderValue};

/// One endpoint on plain HTTP/1.1, and the request sent to it.
#[derive(Debug)]
pub(crate) struct Target {
    /// The host to connect to.
    pub(crate) host: String,
    /// Its port.
    pub(crate) port: u16,
    /// The `Host` header's value.
    pub(crate) authority: HeaderValue,
    /// The path (and query) to POST to.
    pub(crate) path: String,
    /// Extra headers of every request.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// The JSON body of every request.
    pub(crate) body: Bytes,
}

impl Target {
    /// A target from an `http://` URL, `NAME: VALUE` headers, the model and whether to stream.
    pub(crate) fn new(
        url: &str,
        headers: &[String],
        model: &str,
        stream: bool,
    ) -> Result<Target, String> {
        let uri: Uri = url.parse().map_err(|e| format!("--url `{url}`: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("--url `{url}`: only http:// URLs are supported"));
        }
        let host = uri
            .host()
            .ok_or_else(|| format!("--url `{url}` has no host"))?;
        let port = uri.port_u16().unwrap_or(80);
        let authority = HeaderValue::from_str(&format!("{host}:{port}"))
            .map_err(|e| format!("--url `{url}`: {e}"))?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        Ok(Target {
            host: host.trim_matches(['[', ']']).to_owned(),
            port,
            authority,
            path,
            headers: headers
                .iter()
                .map(|h| header(h))
                .collect::<Result<_, _>>()?,
            body: body(model, stream),
        })
    }
}

/// `NAME: VALUE` as a header.
fn header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("--header `{text}`: write it NAME: VALUE"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|e| format!("--header `{text}`: {e}"))?;
    let value =
        HeaderValue::from_str(value.trim()).map_err(|e| format!("--header `{text}`: {e}"))?;
    Ok((name, value))
}

/// A short chat request for `model`, streamed or not.
fn body(model: &str, stream: bool) -> Bytes {
    let mut body = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello"}],
        "max_tokens": 16,
    });
    if stream {
        body["stream"] = true.into();
        body["stream_options"] = serde_json::json!({"include_usage": true});
    }
    Bytes::from(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_and_headers_make_a_target() {
        let headers = ["authorization: Bearer k".to_owned()];
        let t = Target::new(
            "http://127.0.0.1:8080/v1/chat/completions",
            &headers,
            "m",
            true,
        )
        .expect("a target");
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 8080));
        assert_eq!(t.path, "/v1/chat/completions");
        assert_eq!(t.headers[0].1, "Bearer k");
        assert!(
            std::str::from_utf8(&t.body)
                .expect("utf-8")
                .contains(r#""stream":true"#)
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(Target::new("https://x/", &[], "m", false).is_err());
        assert!(Target::new("not a url", &[], "m", false).is_err());
        assert!(Target::new("http://x/", &["no colon".to_owned()], "m", false).is_err());
    }
}
