//! JSON text within a cap: the messages and parts of the GenAI conventions, written piece by
//! piece. Each value is at most [`CAP`] bytes. The messages keep their order; the string that
//! passes the cap is cut at a character boundary and ends with [`MARK`]; nothing after it is
//! written, and the JSON stays whole.

use router_sdk::ToolCall;

/// The most bytes of one attribute's JSON.
pub(crate) const CAP: usize = 16 * 1024;

/// Ends a string cut at the cap.
pub(crate) const MARK: &str = "…[truncated]";

/// Room kept past the strings for the structure that closes the JSON and for [`MARK`].
const RESERVE: usize = 256;

/// The most bytes of a role or a finish reason (a provider's own reason may be any text).
const LABEL: usize = 32;

/// One part of a message.
pub(crate) enum Part<'a> {
    /// `{"type": "text", "content"}`.
    Text(&'a str),
    /// `{"type": "tool_call", "id", "name", "arguments"}`: arguments as the model wrote them.
    Call(&'a ToolCall),
    /// `{"type": "tool_call_response", "id", "result"}`.
    Result { id: &'a str, text: &'a str },
}

/// JSON text written piece by piece, at most [`CAP`] bytes.
#[derive(Default)]
pub(crate) struct Capped {
    pub(crate) out: String,
    /// A string passed the cap: the rest is closed, not written.
    cut: bool,
}

impl Capped {
    /// Room left for strings' escaped text.
    fn room(&self) -> usize {
        CAP.saturating_sub(RESERVE + self.out.len())
    }

    /// `[messages]`, until one is cut.
    pub(crate) fn messages<'a, P>(&mut self, messages: impl IntoIterator<Item = (&'static str, P)>)
    where
        P: IntoIterator<Item = Part<'a>>,
    {
        self.out.push('[');
        for (n, (role, parts)) in messages.into_iter().enumerate() {
            if self.cut {
                break;
            }
            if n > 0 {
                self.out.push(',');
            }
            self.message(role, parts, None);
        }
        self.out.push(']');
    }

    /// `{"role", "parts", "finish_reason"}`; with no room left, its one part says so.
    pub(crate) fn message<'a>(
        &mut self,
        role: &str,
        parts: impl IntoIterator<Item = Part<'a>>,
        finish: Option<&str>,
    ) {
        self.out.push_str("{\"role\":");
        self.label(role);
        self.out.push_str(",\"parts\":");
        if self.room() == 0 {
            self.parts([Part::Text("")]);
        } else {
            self.parts(parts);
        }
        if let Some(finish) = finish {
            self.out.push_str(",\"finish_reason\":");
            self.label(finish);
        }
        self.out.push('}');
    }

    /// `[parts]`, until one is cut; with no room for the next, a text part that says so.
    pub(crate) fn parts<'a>(&mut self, parts: impl IntoIterator<Item = Part<'a>>) {
        self.out.push('[');
        for (n, part) in parts.into_iter().enumerate() {
            if self.cut {
                break;
            }
            if n > 0 {
                self.out.push(',');
            }
            if self.room() == 0 {
                self.part(Part::Text(""));
            } else {
                self.part(part);
            }
        }
        self.out.push(']');
    }

    fn part(&mut self, part: Part<'_>) {
        match part {
            Part::Text(content) => {
                self.out.push_str("{\"type\":\"text\",\"content\":");
                self.string(content);
            }
            Part::Call(call) => {
                self.out.push_str("{\"type\":\"tool_call\",\"id\":");
                self.string(&call.id);
                self.out.push_str(",\"name\":");
                self.string(&call.name);
                self.out.push_str(",\"arguments\":");
                self.string(&call.arguments);
            }
            Part::Result { id, text } => {
                self.out
                    .push_str("{\"type\":\"tool_call_response\",\"id\":");
                self.string(id);
                self.out.push_str(",\"result\":");
                self.string(text);
            }
        }
        self.out.push('}');
    }

    /// `text` as a JSON string, cut to the room left (then ending with [`MARK`]); empty once
    /// something was cut.
    fn string(&mut self, text: &str) {
        let room = self.room();
        let end = if self.cut { 0 } else { fit(text, room) };
        let cut = !self.cut && (end < text.len() || room == 0);
        let mut kept = serde_json::to_string(&text[..end]).unwrap_or_default();
        if cut {
            kept.insert_str(kept.len() - 1, MARK);
            self.cut = true;
        }
        self.out.push_str(&kept);
    }

    /// A role or a finish reason: short, written whole (at most [`LABEL`] bytes of it), within
    /// the room [`RESERVE`] keeps.
    fn label(&mut self, label: &str) {
        let label = &label[..floor_boundary(label, LABEL)];
        self.out
            .push_str(&serde_json::to_string(label).unwrap_or_default());
    }
}

/// How many bytes of `text` fit in `room` bytes once escaped as JSON (at a character boundary).
fn fit(text: &str, room: usize) -> usize {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        // As serde_json escapes: `"`, `\` and the control characters, some in two bytes.
        let width = match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            c if c < ' ' => 6,
            c => c.len_utf8(),
        };
        if used + width > room {
            return at;
        }
        used += width;
    }
    text.len()
}

/// The last character boundary of `text` at or before `at`.
pub(crate) fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}
