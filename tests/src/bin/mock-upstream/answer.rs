//! What the mock answers: one whole chat completion, or the events of a streamed one.

use bytes::Bytes;

/// The usage every answer reports.
const USAGE: &str = r#"{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}"#;

/// The content pieces a stream sends, one `chat.completion.chunk` each.
const PIECES: [&str; 3] = ["Hello", " from", " the mock."];

/// A whole `chat.completion` with usage.
pub(crate) fn whole() -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"chatcmpl-mock","object":"chat.completion","created":0,"model":"mock","choices":[{{"index":0,"message":{{"role":"assistant","content":"Hello from the mock."}},"finish_reason":"stop"}}],"usage":{USAGE}}}"#
    ))
}

/// A stream's events in order: the content chunks, the finishing chunk, the usage chunk and
/// `[DONE]`, each a whole `data: ...\n\n` event.
pub(crate) fn events() -> Vec<Bytes> {
    let mut events: Vec<Bytes> = PIECES
        .iter()
        .map(|piece| chunk(&format!(r#"{{"content":"{piece}"}}"#), "null"))
        .collect();
    events.push(chunk("{}", r#""stop""#));
    events.push(event(&format!(
        r#"{{"id":"chatcmpl-mock","object":"chat.completion.chunk","created":0,"model":"mock","choices":[],"usage":{USAGE}}}"#
    )));
    events.push(event("[DONE]"));
    events
}

/// One `chat.completion.chunk` event with this delta and finish reason (JSON values).
fn chunk(delta: &str, finish: &str) -> Bytes {
    event(&format!(
        r#"{{"id":"chatcmpl-mock","object":"chat.completion.chunk","created":0,"model":"mock","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
    ))
}

/// One server-sent event carrying `data`.
fn event(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// Whether a request body asks for a stream (`"stream": true`), without parsing the rest.
pub(crate) fn wants_stream(body: &[u8]) -> bool {
    const KEY: &[u8] = b"\"stream\"";
    let Some(at) = body.windows(KEY.len()).position(|w| w == KEY) else {
        return false;
    };
    let rest = &body[at + KEY.len()..];
    let rest = skip_space(rest);
    let Some(rest) = rest.strip_prefix(b":") else {
        return false;
    };
    skip_space(rest).starts_with(b"true")
}

fn skip_space(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    &bytes[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_read_from_the_body() {
        assert!(wants_stream(br#"{"model":"m","stream":true}"#));
        assert!(wants_stream(br#"{"stream" : true}"#));
        assert!(!wants_stream(br#"{"stream":false}"#));
        assert!(!wants_stream(br#"{"model":"m"}"#));
        assert!(!wants_stream(br#"{"stream""#));
    }

    #[test]
    fn every_event_is_json_or_done() {
        let events = events();
        assert_eq!(events.len(), PIECES.len() + 3);
        for e in &events[..events.len() - 1] {
            let text = std::str::from_utf8(e).expect("utf-8");
            let data = text.strip_prefix("data: ").expect("an event");
            serde_json::from_str::<serde_json::Value>(data.trim_end()).expect("JSON");
        }
        assert_eq!(&events[events.len() - 1][..], b"data: [DONE]\n\n");
        serde_json::from_slice::<serde_json::Value>(&whole()).expect("JSON");
    }
}
