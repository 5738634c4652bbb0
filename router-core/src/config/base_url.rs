//! A provider's `base_url`: checked at load, so that a URL the HTTP client cannot send to, or one
//! carrying a secret, is refused with the file, line and field instead of failing at the first
//! request or being printed by `llmroute providers`.
//!
//! The URL is read by the parser the HTTP client itself uses (`url`, which `reqwest` sends
//! with), so what loads is what can be sent. On top of what it refuses: a scheme other than
//! `http://` or `https://`, port 0, a user name or password (`user:password@`), a query string
//! (`?...`) or a fragment (`#...`), since a key written there would be sent with every request
//! and shown wherever the URL is; and spaces, control characters and backslashes, which the
//! parser would silently drop or rewrite.
//!
//! Messages never repeat a value that holds `@`, `?` or `#` (the places a secret hides); other
//! values are shown, to help find the typo.

use url::{ParseError, Url};

/// What to write instead, appended to every problem.
const WRITE: &str =
    "write the full URL as the provider documents it, e.g. https://api.openai.com/v1";

/// Where an API key belongs, appended to the problems a key may have caused.
const KEY_GOES: &str = "an API key goes in the environment variable `api_key_env` names, \
                        never in the URL";

/// `text` as a usable base URL (scheme in lowercase, trailing `/` dropped), or what is wrong
/// with it and what to do, in words safe to show.
pub(crate) fn check_base_url(text: &str) -> Result<String, String> {
    check(text).map_err(|problem| format!("{problem}; {WRITE}"))
}

/// [`check_base_url`] without the closing advice: for other URLs (a collector's).
pub(crate) fn check(text: &str) -> Result<String, String> {
    let shown = shown(text);
    if text.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{shown} contains a space or a control character; remove it"
        ));
    }
    if text.contains('\\') {
        return Err(format!(
            "{shown} contains a backslash; separate the path with `/`"
        ));
    }
    // The parser takes `https:/host` and `https:host` as `https://host`: what it would send
    // to is then not what is written (nor what `llmroute providers` shows).
    let Some(slashes) = text.find("://") else {
        let scheme = text.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
        return Err(match scheme.as_deref() {
            Some(scheme @ ("http" | "https")) => {
                format!(
                    "{shown} lacks the `//` after `{scheme}:`; write `{scheme}://` and the host"
                )
            }
            _ => format!("{shown} must start with http:// or https://"),
        });
    };
    // The parser reads `https:///v1` as host `v1`.
    let rest = &text[slashes + 3..];
    if rest.starts_with('/') {
        return Err("has no host after the scheme".to_owned());
    }
    let url = Url::parse(text).map_err(|e| unparsable(&shown, e))?;
    let scheme = url.scheme();
    if scheme != "https" && scheme != "http" {
        return Err(format!(
            "{shown} must start with http:// or https://, the schemes provider APIs use"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "holds a user name or password before `@` (value not shown); remove it: {KEY_GOES}"
        ));
    }
    if url.query().is_some() {
        return Err(format!(
            "has a query string (`?...`, value not shown); remove it: {KEY_GOES}, and a \
             base URL takes no parameters"
        ));
    }
    if url.fragment().is_some() {
        return Err(
            "has a fragment (`#...`, value not shown); remove it: it is never sent to the \
             provider"
                .to_owned(),
        );
    }
    if url.port() == Some(0) {
        return Err(format!("{shown} has port 0, out of range; {PORTS}"));
    }
    // As written, with the scheme in lowercase: the parser's own form would also lowercase the
    // host and add a `/`, which `llmroute providers` need not show.
    Ok(format!("{scheme}://{}", rest.trim_end_matches('/')))
}

/// The ports a base URL may name.
const PORTS: &str = "write a port from 1 to 65535, or none for the scheme's default";

/// What the parser's refusal `e` of `shown` means, in words.
fn unparsable(shown: &str, e: ParseError) -> String {
    match e {
        ParseError::RelativeUrlWithoutBase => {
            format!("{shown} must start with http:// or https://")
        }
        ParseError::EmptyHost => "has no host after the scheme".to_owned(),
        ParseError::InvalidPort => {
            format!("{shown} has a port that is not a number from 1 to 65535; {PORTS}")
        }
        ParseError::InvalidIpv4Address => format!(
            "{shown} has a host that ends in a number but is not an IPv4 address; write the \
             address as four numbers from 0 to 255, e.g. 10.0.0.1, or a host name"
        ),
        ParseError::InvalidIpv6Address => {
            format!("{shown} has a host in `[...]` that is not an IPv6 address; write e.g. [::1]")
        }
        ParseError::InvalidDomainCharacter | ParseError::IdnaError => format!(
            "{shown} has a host name with a character a host name cannot hold; use letters, \
             digits, `-` and `.`"
        ),
        other => format!("{shown} is not a URL ({other})"),
    }
}

/// `` `value` ``, or `(value not shown)` when it holds `@`, `?` or `#`, where secrets hide.
fn shown(text: &str) -> String {
    if text.contains(['@', '?', '#']) {
        "(value not shown)".to_owned()
    } else {
        format!("`{text}`")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::Registry;
    use super::check_base_url;

    /// A provider whose `base_url` (line 4) is `url`.
    fn load(url: &str) -> Result<Registry, super::super::ConfigError> {
        let yaml = format!(
            "providers:\n  - name: p\n    api: openai\n    base_url: \"{url}\"\n    \
             api_key_env: P_KEY\n    models:\n      \
             - {{ name: m, price: {{ input: 1, output: 2 }} }}\n"
        );
        Registry::from_yaml_str(&yaml, "urls.yaml")
    }

    #[test]
    fn the_file_line_and_field_are_named_and_a_secret_is_not() {
        for (url, want) in [
            ("https://api.x.com/v1?key=AIzaSECRET", "query string"),
            (
                "https://user:AIzaSECRET@api.x.com/v1",
                "user name or password",
            ),
            ("https://x:99999/v1", "not a number from 1 to 65535"),
        ] {
            let msg = load(url).unwrap_err().to_string();
            for part in ["urls.yaml:4:", "providers[p].base_url", want] {
                assert!(msg.contains(part), "{url}: {part:?} missing from: {msg}");
            }
            assert!(!msg.contains("SECRET"), "the secret leaked: {msg}");
        }
        let registry = load("HTTPS://api.x.com/v1/").unwrap();
        assert_eq!(registry.providers[0].base_url, "https://api.x.com/v1");
    }

    #[test]
    fn accepts_what_providers_document_and_drops_a_trailing_slash() {
        let cases = [
            ("https://api.openai.com/v1", "https://api.openai.com/v1"),
            ("https://api.anthropic.com", "https://api.anthropic.com"),
            ("https://example.com/", "https://example.com"),
            ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1"),
            ("http://[::1]:8080/v1", "http://[::1]:8080/v1"),
            ("http://[::1]", "http://[::1]"),
            ("HTTPS://Api.Example.com/V1", "https://Api.Example.com/V1"),
            ("http://localhost:65535", "http://localhost:65535"),
            (
                "http://my_host.internal:1/v1beta",
                "http://my_host.internal:1/v1beta",
            ),
            (
                "https://gateway.ai.cloudflare.com/v1/0123456789abcdef0123456789abcdef/gw/openai",
                "https://gateway.ai.cloudflare.com/v1/0123456789abcdef0123456789abcdef/gw/openai",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(check_base_url(text).as_deref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_what_the_client_cannot_send_to_naming_the_part() {
        let cases = [
            ("", "must not be empty"),
            ("api.deepseek.com/v1", "must start with http:// or https://"),
            ("localhost:8080/v1", "must start with http:// or https://"),
            ("https:/api.openai.com/v1", "lacks the `//` after `https:`"),
            ("HTTP:api.openai.com/v1", "lacks the `//` after `http:`"),
            ("https:", "lacks the `//` after `https:`"),
            ("ftp://h", "http://"),
            ("https://", "no host"),
            ("https:///v1", "no host"),
            ("https://x:99999/v1", "not a number from 1 to 65535"),
            ("https://x:0/v1", "port 0, out of range"),
            ("https://x:8o8o/v1", "not a number from 1 to 65535"),
            ("https://a b/v1", "a space"),
            ("https://x\\v1", "backslash"),
            ("https://x^y/v1", "a character a host name cannot hold"),
            ("https://10.0.0.300/v1", "not an IPv4 address"),
            ("https://[::1/v1", "not an IPv6 address"),
            ("https://[zz]/v1", "not an IPv6 address"),
        ];
        for (text, want) in cases {
            let err = check_base_url(text).unwrap_err();
            assert!(err.contains(want), "{text}: {want:?} missing from: {err}");
            assert!(err.contains("e.g. https://api.openai.com/v1"), "{err}");
        }
    }

    #[test]
    fn refuses_a_secret_in_the_url_without_showing_it() {
        let cases = [
            ("https://api.x.com/v1?key=AIzaSECRET", "query string"),
            ("https://api.x.com/v1/?key=AIzaSECRET#frag", "query string"),
            ("https://api.x.com/v1#AIzaSECRET", "fragment"),
            (
                "https://user:AIzaSECRET@api.x.com/v1",
                "user name or password",
            ),
            ("https://AIzaSECRET@api.x.com/v1", "user name or password"),
            ("https://u:AIzaSECRET@x:99999/v1", "(value not shown)"),
            ("api.x.com/v1?key=AIzaSECRET", "must start with http://"),
            ("https://x y/v1?key=AIzaSECRET", "a space"),
        ];
        for (text, want) in cases {
            let err = check_base_url(text).unwrap_err();
            assert!(err.contains(want), "{text}: {want:?} missing from: {err}");
            assert!(!err.contains("SECRET"), "the secret leaked: {err}");
            assert!(!err.contains("AIza"), "part of the secret leaked: {err}");
        }
        for text in [
            "https://api.x.com/v1?key=AIzaSECRET",
            "https://user:AIzaSECRET@api.x.com/v1",
        ] {
            let err = check_base_url(text).unwrap_err();
            assert!(err.contains("`api_key_env`"), "{err}");
        }
    }
}
