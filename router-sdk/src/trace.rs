//! A request's place in a distributed trace (W3C Trace Context): the caller's `traceparent`,
//! read by whoever serves the request, and the one each provider call sends on. The router only
//! carries the ids and stamps each attempt with its own span id; building and exporting spans is
//! the caller's (the gateway's `telemetry`).

/// A trace id: 16 bytes, never all zero.
pub type TraceId = [u8; 16];
/// A span id: 8 bytes, never all zero.
pub type SpanId = [u8; 8];

/// Where a request sits in a trace: its trace, the span it runs under (the caller's, or the
/// gateway's server span), and whether the trace is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace.
    pub trace_id: TraceId,
    /// The span the request's provider calls are children of.
    pub parent_id: SpanId,
    /// The trace is recorded (the `sampled` flag).
    pub sampled: bool,
}

impl TraceParent {
    /// Reads a `traceparent` header: `VERSION-TRACEID-PARENTID-FLAGS` in lowercase hex.
    /// Version `00` must be exactly that long; a later version may carry more after the flags.
    /// `None` for anything else, all-zero ids and version `ff` included: the request then
    /// starts a trace of its own.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().splitn(5, '-');
        let version = parts.next()?;
        let (trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?);
        let rest = parts.next();
        let version = u8::from_str_radix(hex(version, 2)?, 16).ok()?;
        if version == 0xff || (version == 0 && rest.is_some()) || flags.len() != 2 {
            return None;
        }
        let trace_id: TraceId = bytes(hex(trace, 32)?)?;
        let parent_id: SpanId = bytes(hex(parent, 16)?)?;
        let flags = u8::from_str_radix(hex(flags, 2)?, 16).ok()?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` header naming `span` (a child of this one) in this trace.
    pub fn header_for(&self, span: SpanId) -> String {
        let flags = if self.sampled { "01" } else { "00" };
        format!("00-{}-{}-{flags}", to_hex(&self.trace_id), to_hex(&span))
    }
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// `s` when it is `len` lowercase hex digits.
fn hex(s: &str, len: usize) -> Option<&str> {
    let ok = s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then_some(s)
}

/// The bytes of an even-length hex string already checked by [`hex`].
fn bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn hex_is_two_lowercase_digits_a_byte() {
        assert_eq!(to_hex(&[0x00, 0x0f, 0xa5, 0xff, 0x10]), "000fa5ff10");
        assert_eq!(to_hex(&[]), "");
    }

    #[test]
    fn a_valid_traceparent_is_read_with_its_sampled_flag() {
        let t = TraceParent::parse(&format!("00-{TRACE}-00f067aa0ba902b7-01")).unwrap();
        assert_eq!(to_hex(&t.trace_id), TRACE);
        assert_eq!(to_hex(&t.parent_id), "00f067aa0ba902b7");
        assert!(t.sampled);
        let t = TraceParent::parse(&format!("00-{TRACE}-00f067aa0ba902b7-00")).unwrap();
        assert!(!t.sampled);
        // A later version may carry more after the flags.
        let later = format!("01-{TRACE}-00f067aa0ba902b7-09-what-comes-next");
        assert!(TraceParent::parse(&later).unwrap().sampled);
    }

    #[test]
    fn a_malformed_traceparent_is_none() {
        for bad in [
            String::new(),
            "garbage".to_owned(),
            format!("00-{TRACE}-00f067aa0ba902b7-01-extra"),
            format!("ff-{TRACE}-00f067aa0ba902b7-01"),
            format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            format!("00-{TRACE}-0000000000000000-01"),
            format!("00-{}-00f067aa0ba902b7-01", TRACE.to_uppercase()),
            format!("00-{TRACE}-00f067aa0ba902b-01"),
            format!("00-{TRACE}-00f067aa0ba902b7-1"),
            format!("00-{TRACE}-00f067aa0ba902bé-01"),
        ] {
            assert_eq!(TraceParent::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_child_header_keeps_the_trace_and_the_flag() {
        let t = TraceParent::parse(&format!("00-{TRACE}-00f067aa0ba902b7-01")).unwrap();
        let header = t.header_for([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(header, format!("00-{TRACE}-0102030405060708-01"));
        assert_eq!(
            TraceParent::parse(&header).unwrap().parent_id,
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
    }
}
