//! What each recorded answer in `LLMROUTE_WIRE_FIXTURES` says, as llmroute must read it: the
//! project's own reading of each file and of what the provider bills (PROVIDERS.md). xAI's
//! reasoning outside `completion_tokens` is output; Gemini's thoughts are output; Anthropic's
//! prompt is input + cache creation + cache read, and its thinking tokens are reasoning inside
//! the output. Usage is `[prompt, completion, cached, reasoning]`.

/// The answer's text: its start and its length in characters, or (a JSON answer) the value at
/// a JSON pointer.
#[derive(Debug, Clone, Copy)]
pub enum Text {
    Starts(&'static str, usize),
    Json(&'static str, &'static str),
}

/// No text.
pub const EMPTY: Text = Text::Starts("", 0);

const fn starts(start: &'static str, chars: usize) -> Text {
    Text::Starts(start, chars)
}

const fn json(pointer: &'static str, value: &'static str) -> Text {
    Text::Json(pointer, value)
}

/// How the request ends.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    /// An answer with this finish reason and usage (`None`: the provider reported none, so the
    /// receipt carries the estimate).
    Answer(&'static str, Option<[u64; 4]>),
    /// An error of this class ([`router_sdk::Error::class`]), after the text.
    Fails(&'static str),
}

/// One fixture's expected reading.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    pub name: &'static str,
    pub outcome: Outcome,
    pub text: Text,
    /// Tool calls: name and arguments (compared as JSON, or as a start when not JSON).
    pub calls: &'static [(&'static str, &'static str)],
    pub refusal: Option<&'static str>,
    /// Asked for a JSON answer (Anthropic's answer tool, named `json` in these recordings).
    pub json_answer: bool,
}

const fn answer(name: &'static str, finish: &'static str, text: Text, usage: [u64; 4]) -> Expect {
    with(name, Outcome::Answer(finish, Some(usage)), text)
}

const fn estimated(name: &'static str, finish: &'static str, text: Text) -> Expect {
    with(name, Outcome::Answer(finish, None), text)
}

const fn fails(name: &'static str, class: &'static str, text: Text) -> Expect {
    with(name, Outcome::Fails(class), text)
}

const fn with(name: &'static str, outcome: Outcome, text: Text) -> Expect {
    Expect {
        name,
        outcome,
        text,
        calls: &[],
        refusal: None,
        json_answer: false,
    }
}

impl Expect {
    const fn calls(self, calls: &'static [(&'static str, &'static str)]) -> Expect {
        Expect { calls, ..self }
    }

    const fn refusal(self, refusal: &'static str) -> Expect {
        Expect {
            refusal: Some(refusal),
            ..self
        }
    }

    const fn json_answer(self) -> Expect {
        Expect {
            json_answer: true,
            ..self
        }
    }
}

const SF: &str = r#"{"location":"San Francisco"}"#;
const WEATHER_SF: &[(&str, &str)] = &[("weather", SF)];
const EDINBURGH_AAPL: &[(&str, &str)] = &[
    (
        "GetWeatherArgs",
        r#"{"city":"Edinburgh","country":"GB","units":"c"}"#,
    ),
    (
        "get_stock_price",
        r#"{"ticker":"AAPL","exchange":"NASDAQ"}"#,
    ),
];

#[rustfmt::skip]
pub const EXPECTED: &[Expect] = &[
    // OpenAI-compatible, whole.
    answer("oai-text-gpt4o", "stop", starts("I'm unable to provide real-t", 198), [14, 37, 0, 0]),
    answer("oai-refusal-gpt4o", "stop", EMPTY, [79, 12, 0, 0])
        .refusal("I'm very sorry, but I can't assist with that."),
    answer("oai-parallel-tools-gpt4o", "tool_calls", EMPTY, [149, 60, 0, 0]).calls(EDINBURGH_AAPL),
    answer("oai-length-gpt4o", "length", starts("{\"", 2), [79, 1, 0, 0]),
    answer("oai-n3-choices-gpt4o", "stop", starts(r#"{"city":"San Francisco","tem"#, 53), [79, 44, 0, 0]),
    answer("oai-text-gpt41nano", "stop", starts("**Holiday Name:** Galaxy Day", 1842), [16, 363, 0, 0]),
    answer("oai-cached-tokens-gpt4omini", "stop", starts("Upon the morning dew", 647), [1370, 155, 1280, 0]),
    answer("oai-tools-gpt4omini", "tool_calls", EMPTY, [207, 46, 0, 0]).calls(&[
        ("get_weather", r#"{"city":"San Francisco"}"#),
        ("get_population", r#"{"city":"San Francisco"}"#),
    ]),
    answer("deepseek-tool-call-reasoner", "tool_calls", EMPTY, [339, 92, 320, 48]).calls(WEATHER_SF),
    answer("deepseek-reasoning", "stop", starts("The word \"strawberry\"", 107), [18, 345, 0, 315]),
    answer("groq-tool-call", "tool_calls", EMPTY, [218, 15, 0, 0]).calls(&[("weather", "{}")]),
    answer("groq-reasoning-qwen3", "stop", starts("The word \"strawberry\"", 206), [17, 649, 0, 570]),
    // xAI: 189 reasoning tokens outside completion_tokens 26 (total 506 = 291 + 26 + 189).
    answer("xai-tool-call-grok3mini", "tool_calls", EMPTY, [291, 215, 244, 189]).calls(WEATHER_SF),
    answer("oai-legacy-function-call", "tool_calls", EMPTY, [84, 18, 0, 0])
        .calls(&[("get_current_weather", r#"{"location":"Boston, MA"}"#)]),
    // OpenAI-compatible, streamed.
    answer("oai-stream-text-gpt4o", "stop", starts("I'm unable to provide real-t", 159), [14, 30, 0, 0]),
    answer("oai-stream-refusal-gpt4o", "stop", EMPTY, [79, 11, 0, 0])
        .refusal("I'm sorry, I can't assist with that request."),
    answer("oai-stream-refusal-logprobs-gpt4o", "stop", EMPTY, [79, 12, 0, 0])
        .refusal("I'm very sorry, but I can't assist with that."),
    answer("oai-stream-tool-call-gpt4o", "tool_calls", EMPTY, [44, 16, 0, 0])
        .calls(&[("get_weather", r#"{"city":"New York City"}"#)]),
    answer("oai-stream-parallel-tools-gpt4o", "tool_calls", EMPTY, [149, 60, 0, 0]).calls(EDINBURGH_AAPL),
    answer("oai-stream-length-gpt4o", "length", starts("{\"", 2), [79, 1, 0, 0]),
    answer("oai-stream-n3-gpt4o", "stop", starts(r#"{"city":"San Francisco","tem"#, 53), [79, 42, 0, 0]),
    answer("oai-stream-logprobs-gpt4o", "stop", starts("Foo!", 4), [9, 2, 0, 0]),
    answer("oai-stream-text-gpt41nano", "stop", starts("**Holiday Name:** Harmony Da", 1724), [16, 300, 0, 0]),
    answer("azure-stream-model-router", "stop", starts("Capital of Denmark.", 19), [15, 78, 0, 64]),
    answer("deepseek-stream-tool-call", "tool_calls", EMPTY, [339, 83, 320, 39]).calls(WEATHER_SF),
    answer("groq-stream-tool-call", "tool_calls", EMPTY, [210, 15, 0, 0]).calls(&[("weather", "{}")]),
    // xAI: 196 reasoning tokens outside completion_tokens 26 (total 513).
    answer("xai-stream-tool-call", "tool_calls", EMPTY, [291, 222, 290, 196]).calls(WEATHER_SF),
    fails("oai-stream-error-first-chunk", "server_error", EMPTY),
    fails("oai-stream-error-mid", "server_error", starts("I'm unable to", 13)),
    // Anthropic, whole.
    answer("ant-text-sonnet45", "stop", starts("Hello! I'm doing well, thank", 105), [12, 29, 0, 0]),
    answer("ant-tool-no-args", "tool_calls", starts("<thinking>", 255), [602, 93, 0, 0])
        .calls(&[("updateIssueList", "{}")]),
    answer("ant-json-tool-haiku45", "stop", json("/elements/3/location", r#""Berlin""#), [1151, 87, 0, 0])
        .json_answer(),
    answer("ant-other-tool-haiku45", "tool_calls", EMPTY, [843, 28, 0, 0]).calls(WEATHER_SF).json_answer(),
    answer("ant-thinking-text", "stop", starts("925 ÷ 5 = 185", 13), [69, 33, 0, 0]),
    answer("ant-thinking-tokens-opus5", "stop", starts("## Step 1: Set up the proble", 2644), [51, 1699, 0, 139]),
    answer("ant-thinking-tool-call", "tool_calls", EMPTY, [599, 59, 0, 18])
        .calls(&[("checkSandboxErrors", "{}")]),
    answer("ant-web-fetch-server-tool", "stop", starts("The page at **example.com** ", 187), [7204, 162, 0, 0]),
    answer("ant-context-mgmt-haiku45", "stop", starts("\n\nHere's a comparison", 493), [859, 132, 0, 0]),
    // Anthropic, streamed.
    answer("ant-stream-basic-opus3", "stop", starts("Hello there!", 12), [11, 6, 0, 0]),
    answer("ant-stream-tool-use-sonnet4", "tool_calls", starts("I'll check the current weath", 48), [377, 65, 0, 0])
        .calls(&[("get_weather", r#"{"location":"Paris"}"#)]),
    // Cut by max_tokens inside the tool's input: its arguments are the JSON so far.
    answer("ant-stream-partial-json-max-tokens", "length", starts("I'll create a comprehensive ", 135), [450, 124, 0, 0])
        .calls(&[("make_file", r#"{"filename": "taxes.txt", "lines_of_text": ["#)]),
    answer("ant-stream-text-sonnet45", "stop", starts("Hello! I'm doing well, thank", 108), [12, 30, 0, 0]),
    answer("ant-stream-tool-no-args", "tool_calls", starts("I'll update the issue list f", 35), [565, 48, 0, 0])
        .calls(&[("updateIssueList", "{}")]),
    answer("ant-stream-json-tool", "stop", json("/elements/0/temperature", "58"), [849, 47, 0, 0]).json_answer(),
    answer("ant-stream-thinking", "stop", starts("925 ÷ 5 = 185", 13), [69, 53, 0, 0]),
    // Prompt 6 + 3337 cache creation + 6289 cache read, from message_delta.
    answer("ant-stream-cache-server-tools", "stop", starts("The sum of the squares of th", 62), [9632, 198, 6289, 0]),
    answer("ant-stream-delta-input-tokens", "stop", starts("pong", 4), [61, 2, 0, 0]),
    fails("ant-stream-overloaded-mid", "overloaded", starts("Hello", 5)),
    // Gemini, whole: thoughts are output.
    answer("gem-text-3pro", "stop", starts("There are **3** r's in straw", 78), [9, 272, 0, 244]),
    answer("gem-tool-call-3pro", "tool_calls", EMPTY, [29, 908, 0, 893]).calls(WEATHER_SF),
    answer("gem-tool-call-gemini3", "tool_calls", EMPTY, [29, 1816, 0, 1801]).calls(WEATHER_SF),
    answer("gem-reasoning-3pro", "stop", starts("There are **3** \"r\"s in stra", 79), [9, 311, 0, 282]),
    answer("gem-basic-2flash", "stop", starts("Google's headquarters, also ", 98), [7, 22, 0, 0]),
    answer("gem-thinking-function-call", "tool_calls", EMPTY, [38, 509, 0, 501]).calls(&[("now", "{}")]),
    answer("gem-implicit-caching-25flash", "stop", starts("Red Riding Hood is looking f", 60), [12013, 88, 11243, 73]),
    answer("gem-finish-safety", "content_filter", starts("<redacted>", 10), [8, 0, 0, 0]),
    estimated("gem-prompt-blocked", "content_filter", EMPTY),
    // Gemini, streamed: the last chunk's counts (the finishing one).
    answer("gem-stream-basic-2flash", "stop", starts("The capital of Wyoming is **", 40), [7, 10, 0, 0]),
    answer("gem-stream-thought-summary", "stop", starts("The sky is blue because tiny", 263), [10, 588, 0, 540]),
    answer("gem-stream-thinking-function-call", "tool_calls", EMPTY, [38, 174, 0, 168]).calls(&[("now", "{}")]),
    estimated("gem-stream-prompt-blocked", "content_filter", EMPTY),
    estimated("gem-stream-finish-safety", "content_filter", starts("No", 2)),
    answer("gem-stream-text-3pro", "stop", starts("There are **3** \"r\"s in stra", 55), [9, 208, 0, 185]),
    answer("gem-stream-tool-call-3pro", "tool_calls", EMPTY, [29, 60, 0, 45]).calls(WEATHER_SF),
    answer("gem-stream-reasoning-3pro", "stop", starts("There are **3** \"r\"s in stra", 79), [9, 285, 0, 256]),
    answer("gem-stream-tool-call-gemini3", "tool_calls", EMPTY, [29, 819, 0, 804]).calls(WEATHER_SF),
    fails("gem-stream-error-mid", "server_error", starts("The capital of Wyoming", 22)),
];

/// Fixtures llmroute is known to read differently, and why (none today).
pub const KNOWN: &[(&str, &str)] = &[];
