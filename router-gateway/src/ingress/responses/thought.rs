//! A [`Thought`] carried through a Responses client as a `reasoning` item's
//! `encrypted_content`: `llmroute.v1.` and the thought's JSON in base64url (no padding). The
//! client cannot read it and sends it back unchanged on the next turn, which gives the provider
//! that wrote the thought its signed thinking back, whatever served the turns between.
//!
//! The content is encoded, not encrypted: it holds only what the provider sent the caller
//! (the thinking text, its signature or redacted data).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use router_sdk::Thought;

/// What starts llmroute's encoding, and names its version.
const PREFIX: &str = "llmroute.v1.";

/// `thought` as a reasoning item's `encrypted_content`.
pub(super) fn encode(thought: &Thought) -> String {
    // A `Thought` is strings and an enum: its JSON cannot fail to serialize.
    let json = serde_json::to_vec(thought).unwrap_or_default();
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(json))
}

/// What an `encrypted_content` holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decoded {
    /// A thought llmroute encoded.
    Thought(Thought),
    /// llmroute's prefix over something that is not a thought.
    Malformed,
    /// Someone else's (OpenAI's own encrypted reasoning).
    Foreign,
}

/// Reads an `encrypted_content`.
pub(super) fn decode(content: &str) -> Decoded {
    let Some(encoded) = content.strip_prefix(PREFIX) else {
        return Decoded::Foreign;
    };
    URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .map_or(Decoded::Malformed, Decoded::Thought)
}
