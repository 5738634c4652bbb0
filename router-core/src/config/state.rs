//! The `state` URL: checking it, and showing it without its password.

use redis::IntoConnectionInfo;

/// `url` with any password replaced by `***`, fit for messages and output.
///
/// `redis://user:secret@host:6379/0` becomes `redis://user:***@host:6379/0`, and
/// `redis://:secret@host` becomes `redis://:***@host`; a `pass=` / `password=` query value
/// becomes `***` too. Text that is not a URL but contains `@` keeps only what follows the last
/// `@`. When in doubt this hides too much rather than too little.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let rest = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let host = &rest[at + 1..];
            match userinfo.find(':') {
                Some(colon) if !scheme.is_empty() => format!("{}:***@{host}", &userinfo[..colon]),
                _ if scheme.is_empty() => format!("***@{host}"),
                _ => format!("{userinfo}@{host}"),
            }
        }
        None => rest.to_owned(),
    };
    format!("{scheme}{}", redact_query(&rest))
}

/// Replace the values of `pass=` and `password=` query parameters (redis+unix URLs) by `***`.
fn redact_query(text: &str) -> String {
    let Some(q) = text.find('?') else {
        return text.to_owned();
    };
    let params: Vec<String> = text[q + 1..]
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key, _))
                if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
            {
                format!("{key}=***")
            }
            _ => param.to_owned(),
        })
        .collect();
    format!("{}?{}", &text[..q], params.join("&"))
}

/// Check that `url` is a Redis URL the client accepts. The error text is safe to show: it never
/// contains the URL's password.
pub(crate) fn check_redis_url(url: &str) -> Result<(), String> {
    let shown = redact_url(url);
    if url.trim().is_empty() {
        return Err("is empty; write a Redis URL such as redis://127.0.0.1:6379/0".to_owned());
    }
    let Err(err) = url.into_connection_info() else {
        return Ok(());
    };
    // redis-rs does not echo the URL today; scrub anyway, in case a later version does.
    let reason = scrub(&err.to_string(), url, &shown);
    Err(format!(
        "`{shown}` is not a usable Redis URL ({reason}); write it as \
         redis://[user:password@]host:port/db, rediss://... for TLS, or redis+unix:///path"
    ))
}

/// `text` with every occurrence of the raw `url` replaced by its redacted form.
fn scrub(text: &str, url: &str, shown: &str) -> String {
    if url.is_empty() {
        text.to_owned()
    } else {
        text.replace(url, shown)
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redacts_passwords_and_keeps_the_rest() {
        let cases = [
            ("redis://u:pw@h:6379/0", "redis://u:***@h:6379/0"),
            ("redis://:pw@h", "redis://:***@h"),
            ("redis://u@h", "redis://u@h"),
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("rediss://u:p@ss@h/0", "rediss://u:***@h/0"),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=pw",
                "redis+unix:///tmp/r.sock?db=1&pass=***",
            ),
            ("garbage:pw@h", "***@h"),
            ("", ""),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "redact_url({url:?})");
        }
    }
}
