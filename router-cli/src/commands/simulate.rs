//! `llmroute simulate`: the real routing core on a virtual clock against simulated providers.
//!
//! No request is sent and no key is read: a traffic profile given by flags runs through the
//! ledger, selection and retry policy against providers that enforce the configured limits and
//! answer 429 when they are exceeded. Every output says it is a simulation. `--html FILE` also
//! writes the report as a self-contained page with charts (the submodules below).

mod charts;
mod cost;
mod fills;
mod html;
mod page;
mod svg;
mod tables;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use clap::Args;
use router_core::config::Registry;
use router_sim::{self as sim, DeploymentReport, Latency, Profile, SimReport, TokenSize};
use serde::Serialize;

use crate::context::Context;
use crate::failure::Failure;
use crate::flags;

const TITLE: &str = "llmroute simulate — SIMULATION: no requests were sent";
const FOOTER: &str = "SIMULATION: virtual clock, simulated providers; no network, no keys. \
Real latencies, prompt sizes and other traffic differ.";

/// Options of `llmroute simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// Mean requests per second
    #[arg(long, value_name = "RPS", default_value_t = Profile::default().rps)]
    rps: f64,
    /// Simulated time of arrivals: seconds, or with a unit: 90s, 10m, 1h
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    duration: u64,
    /// Mean prompt size in tokens
    #[arg(long, value_name = "N", default_value_t = Profile::default().prompt.mean)]
    prompt_tokens: u64,
    /// Spread of prompt sizes: standard deviation / mean (0: all the same size)
    #[arg(long, value_name = "CV", default_value_t = Profile::default().prompt.spread)]
    prompt_spread: f64,
    /// Mean completion size in tokens
    #[arg(long, value_name = "N", default_value_t = Profile::default().output.mean)]
    output_tokens: u64,
    /// Spread of completion sizes: standard deviation / mean (0: all the same size)
    #[arg(long, value_name = "CV", default_value_t = Profile::default().output.spread)]
    output_spread: f64,
    /// `max_tokens` sent with every request: caps completions and their estimates; providers
    /// count it against TPM when a request arrives. `none`: send none (providers then count the
    /// model's `max_output_tokens`)
    #[arg(long, value_name = "N|none", default_value = "1024", value_parser = max_tokens_arg)]
    max_tokens: MaxTokens,
    /// 0: steady (Poisson) arrivals; B > 0: bursts at (1 + B) x the mean rate with silences
    /// between them, averaging --rps
    #[arg(long, value_name = "B", default_value_t = 0.0)]
    burstiness: f64,
    /// Model name or alias (default: `defaults.model` of the configuration)
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// Seed of every random draw: the same seed and flags give the same report
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Share of each provider limit used by traffic outside llmroute, from 0 up to (not
    /// including) 1
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    foreign_load: f64,
    /// Factor on the configured limits giving what the simulated providers enforce (below 1: the
    /// providers are stricter than the configuration says)
    #[arg(long, value_name = "FACTOR", default_value_t = 1.0)]
    provider_headroom: f64,
    /// Provider time to first token, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = Profile::default().latency.base_ms)]
    latency_ms: u64,
    /// Provider time per completion token, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = Profile::default().latency.per_token_ms)]
    ms_per_token: f64,
    /// Share of the requests sent as batch ones (0 to 1): they use `priorities.batch_share` of
    /// each limit and wait in line behind interactive ones within `priorities.batch_aging_secs`
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    batch: f64,
    /// Print one JSON object (with `"simulation": true`) instead of the table
    #[arg(long)]
    json: bool,
    /// Also write the report as one self-contained HTML page with charts (no script, no
    /// external assets) to FILE
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

/// The largest `--burstiness`: bursts at 1001 x the mean rate, 60 ms of each minute. Beyond it
/// a burst grows shorter than the virtual clock can tell from its start, and the run never ends.
const MAX_BURSTINESS: f64 = 1_000.0;

/// The largest `--prompt-spread` and `--output-spread`.
const MAX_SPREAD: f64 = 100.0;

/// The longest `--latency-ms`: an hour.
const MAX_LATENCY_MS: u64 = 3_600_000;

/// The longest `--ms-per-token`: a minute.
const MAX_MS_PER_TOKEN: f64 = 60_000.0;

impl SimulateArgs {
    /// The numeric flags the simulator does not bound itself, each in a range that keeps the
    /// virtual clock's arithmetic exact and the run finite; otherwise a usage error (exit status
    /// 2) naming the flag, the value and the range. `--rps`, `--duration`, `--foreign-load` and
    /// `--provider-headroom` are checked by the simulator.
    fn check(&self) -> Result<(), Failure> {
        let tokens =
            |flag: &str, n: u64| flags::whole_within(flag, n, (1, flags::MAX_TOKENS), "e.g. 1000");
        tokens("--prompt-tokens", self.prompt_tokens)?;
        tokens("--output-tokens", self.output_tokens)?;
        if let Some(n) = self.max_tokens.0 {
            let range = (1, flags::MAX_TOKENS);
            flags::whole_within("--max-tokens", n, range, "or `none` to send none")?;
        }
        let spread = |flag: &str, x: f64| {
            let hint = "0 for sizes all the same, e.g. 0.5";
            flags::number_within(flag, x, (0.0, MAX_SPREAD), hint)
        };
        spread("--prompt-spread", self.prompt_spread)?;
        spread("--output-spread", self.output_spread)?;
        let hint = "0 for steady arrivals, e.g. 4 for bursts at 5x the rate";
        flags::number_within("--burstiness", self.burstiness, (0.0, MAX_BURSTINESS), hint)?;
        let range = (0, MAX_LATENCY_MS);
        flags::whole_within("--latency-ms", self.latency_ms, range, "e.g. 500")?;
        let range = (0.0, MAX_MS_PER_TOKEN);
        flags::number_within("--ms-per-token", self.ms_per_token, range, "e.g. 10")?;
        let hint = "0 for interactive requests only, e.g. 0.3";
        flags::number_within("--batch", self.batch, (0.0, 1.0), hint)?;
        Ok(())
    }

    fn profile(&self) -> Profile {
        Profile {
            rps: self.rps,
            duration_secs: self.duration,
            prompt: TokenSize {
                mean: self.prompt_tokens,
                spread: self.prompt_spread,
            },
            output: TokenSize {
                mean: self.output_tokens,
                spread: self.output_spread,
            },
            max_tokens: self.max_tokens.0,
            burstiness: self.burstiness,
            model: self.model.clone(),
            seed: self.seed,
            foreign_load: self.foreign_load,
            provider_headroom: self.provider_headroom,
            latency: Latency {
                base_ms: self.latency_ms,
                per_token_ms: self.ms_per_token,
            },
            batch_share: self.batch,
        }
    }
}

/// The longest simulated run: a year, in seconds.
const MAX_DURATION_SECS: u64 = 366 * 24 * 3600;

/// `600`, `90s`, `10m`, `1h` as whole seconds, at most a year.
fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let scale = match unit.trim() {
        "s" | "sec" | "secs" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        other => return Err(format!("unknown unit `{other}`: use s, m or h, e.g. 10m")),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration: use e.g. 600, 90s, 10m, 1h"))?;
    match n.checked_mul(scale) {
        Some(0) => Err(format!("`{s}`: the duration must be above zero")),
        Some(secs) if secs <= MAX_DURATION_SECS => Ok(secs),
        _ => Err(format!(
            "`{s}`: the duration must be at most a year ({MAX_DURATION_SECS} seconds, 8784h)"
        )),
    }
}

/// The JSON form: the report, labelled.
#[derive(Serialize)]
struct Labelled<'a> {
    simulation: bool,
    note: &'static str,
    #[serde(flatten)]
    report: &'a SimReport,
}

/// Runs the simulation over `registry` and prints the report to `out`. A failed write is an
/// `std::io::Error` (reachable with `downcast_ref`) under the context "cannot write output".
pub(crate) async fn run(
    ctx: &Context<'_>,
    args: &SimulateArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    // A bad flag is reported before the configuration is loaded.
    args.check()?;
    let loaded = ctx.load()?;
    simulate(args, &loaded.registry, out).map_err(|e| match e.downcast_ref::<std::io::Error>() {
        Some(io) if io.kind() == std::io::ErrorKind::BrokenPipe => {
            Failure::output(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        _ => Failure::usage(e),
    })
}

/// Simulates `args` over `registry` and prints the report.
fn simulate(args: &SimulateArgs, registry: &Registry, out: &mut dyn Write) -> anyhow::Result<()> {
    let report = sim::run(registry, &args.profile()).map_err(|e| anyhow!(e))?;
    // The page is written first, so a path that cannot be written fails before any output.
    if let Some(path) = &args.html {
        html::write(path, &report)?;
    }
    if args.json {
        let labelled = Labelled {
            simulation: true,
            note: "SIMULATION: no requests were sent",
            report: &report,
        };
        let json = serde_json::to_string_pretty(&labelled).context("cannot encode the report")?;
        writeln!(out, "{json}").context("cannot write output")
    } else {
        write_text(out, &report, args.html.as_deref()).context("cannot write output")
    }
}

/// The text report; `page` is where `--html` wrote the page, if it did.
fn write_text(out: &mut dyn Write, r: &SimReport, page: Option<&Path>) -> std::io::Result<()> {
    writeln!(out, "{TITLE}")?;
    write_profile(out, r)?;
    writeln!(out)?;
    let mut rows = vec![header()];
    rows.extend(r.deployments.iter().map(deployment_row));
    rows.push(total_row(r));
    write_table(out, &rows)?;
    writeln!(out)?;
    write_totals(out, r)?;
    if let Some(path) = page {
        writeln!(
            out,
            "page:      {} (the same SIMULATION as HTML)",
            path.display()
        )?;
    }
    writeln!(out)?;
    writeln!(out, "{FOOTER}")
}

fn write_profile(out: &mut dyn Write, r: &SimReport) -> std::io::Result<()> {
    let p = &r.profile;
    let arrivals = if p.burstiness > 0.0 {
        format!("in bursts at {:.1}x that rate", 1.0 + p.burstiness)
    } else {
        "Poisson arrivals".to_owned()
    };
    writeln!(
        out,
        "traffic:   model {}, {:.1} requests/s for {} ({arrivals}), seed {}",
        r.model,
        p.rps,
        duration(p.duration_secs * 1000),
        p.seed
    )?;
    let cap = p
        .max_tokens
        .map_or_else(String::new, |m| format!(", max_tokens {m}"));
    writeln!(
        out,
        "sizes:     prompts ~{} tokens (spread {}), completions ~{} tokens (spread {}){cap}",
        p.prompt.mean, p.prompt.spread, p.output.mean, p.output.spread
    )?;
    let mut enforced = "the configured limits".to_owned();
    if p.provider_headroom != 1.0 {
        enforced = format!("{enforced} x {}", p.provider_headroom);
    }
    if p.foreign_load > 0.0 {
        enforced = format!(
            "{enforced}, {:.0}% of each used by other traffic",
            100.0 * p.foreign_load
        );
    }
    writeln!(
        out,
        "providers: simulated; enforce {enforced}; answer in {} ms + {} ms/token",
        p.latency.base_ms, p.latency.per_token_ms
    )
}

fn header() -> Vec<String> {
    [
        "deployment",
        "$/Mtok in/out",
        "requests",
        "prompt tok",
        "output tok",
        "cost $",
        "429s",
        "waits",
        "waited",
        "peak rpm",
        "peak tpm",
        "peak in flight",
    ]
    .iter()
    .map(|c| (*c).to_owned())
    .collect()
}

fn deployment_row(d: &DeploymentReport) -> Vec<String> {
    vec![
        d.name.clone(),
        format!("{}/{}", d.input_per_mtok, d.output_per_mtok),
        d.requests.to_string(),
        d.prompt_tokens.to_string(),
        d.completion_tokens.to_string(),
        format!("{:.4}", d.cost_usd),
        d.rate_limited.to_string(),
        d.waits.to_string(),
        duration(d.wait_ms),
        peak(d.peak.rpm, d.limits.rpm),
        peak(d.peak.tpm, d.limits.tpm),
        peak(d.peak.concurrency, d.limits.concurrency),
    ]
}

fn total_row(r: &SimReport) -> Vec<String> {
    let t = &r.totals;
    vec![
        "total".to_owned(),
        String::new(),
        t.served.to_string(),
        t.prompt_tokens.to_string(),
        t.completion_tokens.to_string(),
        format!("{:.4}", t.cost_usd),
        t.rate_limited.to_string(),
        t.waits.to_string(),
        duration(t.wait_ms),
    ]
}

/// `412/500`, or `412` when unlimited.
fn peak(seen: Option<u64>, limit: Option<u64>) -> String {
    let seen = seen.unwrap_or(0);
    limit.map_or_else(|| seen.to_string(), |l| format!("{seen}/{l}"))
}

fn write_totals(out: &mut dyn Write, r: &SimReport) -> std::io::Result<()> {
    let t = &r.totals;
    writeln!(
        out,
        "requests:  {} arrived, {} served, {} failed (no capacity before the deadline {}, \
         every attempt refused {}, timed out {})",
        t.requests, t.served, t.failed, t.failed_no_capacity, t.failed_retries, t.failed_timeout
    )?;
    writeln!(
        out,
        "latency:   p50 {}, p95 {}, max {} from arrival to answer, waits included; {} requests \
         waited for capacity",
        duration(t.latency_p50_ms),
        duration(t.latency_p95_ms),
        duration(t.latency_max_ms),
        t.requests_that_waited
    )?;
    for c in &t.waits_by_class {
        writeln!(
            out,
            "waits:     {} {} requests, {} waited: p50 {}, p95 {}, max {}",
            c.requests,
            c.class,
            c.waited,
            duration(c.p50_ms),
            duration(c.p95_ms),
            duration(c.max_ms)
        )?;
    }
    let b = &r.baselines;
    writeln!(
        out,
        "cost:      ${:.4} routed; ${:.4} all on {} (cheapest, limits aside); ${:.4} all on {} \
         (most expensive)",
        t.cost_usd,
        b.cheapest.cost_usd,
        b.cheapest.deployment,
        b.most_expensive.cost_usd,
        b.most_expensive.deployment
    )?;
    writeln!(
        out,
        "savings:   ${:.4} ({:.1}%) against the most expensive",
        b.savings_usd, b.savings_pct
    )
}

/// `850 ms`, `12.3 s`, `4.5 min`, `1.2 h`.
fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 6e4),
        _ => format!("{:.1} h", ms as f64 / 3.6e6),
    }
}

/// Rows with columns padded to a common width, indented by two spaces; numbers right-aligned.
fn write_table(out: &mut dyn Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    crate::table::write(out, rows, "  ", 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimulateArgs,
    }

    fn registry() -> Registry {
        let yaml = r#"
defaults: { model: chat }
providers:
  - name: cheap
    api: openai
    base_url: http://localhost/v1
    api_key_env: CHEAP_KEY
    models:
      - { name: small, aliases: [chat], price: { input: 0.1, output: 0.4 }, limits: { rpm: 60 } }
  - name: dear
    api: anthropic
    base_url: http://localhost
    api_key_env: DEAR_KEY
    models:
      - { name: large, aliases: [chat], price: { input: 3, output: 15 } }
"#;
        Registry::from_yaml_str(yaml, "simulate.yaml").expect("valid test config")
    }

    fn render(flags: &[&str]) -> String {
        let cli = Cli::try_parse_from(std::iter::once("simulate").chain(flags.iter().copied()))
            .expect("valid flags");
        let mut out = Vec::new();
        simulate(&cli.args, &registry(), &mut out).expect("the simulation runs");
        String::from_utf8(out).expect("utf-8 output")
    }

    #[test]
    fn the_table_is_labelled_a_simulation_and_shows_every_deployment() {
        let text = render(&["--rps", "2", "--duration", "2m"]);
        assert!(text.starts_with(TITLE), "{text}");
        assert!(text.trim_end().ends_with(FOOTER.trim_end()), "{text}");
        for needle in ["cheap/small", "dear/large", "total", "60/60", "savings:"] {
            assert!(text.contains(needle), "no {needle} in\n{text}");
        }
    }

    #[test]
    fn json_is_labelled_a_simulation() {
        let text = render(&["--rps", "1", "--duration", "60", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
        assert_eq!(v["simulation"], true);
        assert_eq!(v["model"], "chat");
        assert!(
            v["totals"]["requests"].as_u64().is_some_and(|n| n > 0),
            "{v}"
        );
    }

    #[test]
    fn out_of_range_flags_are_refused_naming_the_flag_and_the_range() {
        let cases: [(&[&str], &str); 8] = [
            (
                &["--burstiness", "1e300"],
                "--burstiness: must be a number from 0 to 1000, got 1e300",
            ),
            (
                &["--latency-ms", "18446744073709551615"],
                "--latency-ms: must be a whole number from 0 to 3600000, got 18446744073709551615",
            ),
            (
                &["--ms-per-token", "inf"],
                "--ms-per-token: must be a number from 0 to 60000, got inf",
            ),
            (
                &["--prompt-tokens", "18446744073709551615"],
                "--prompt-tokens: must be a whole number from 1 to 4294967295",
            ),
            (
                &["--output-tokens", "0"],
                "--output-tokens: must be a whole number from 1 to 4294967295, got 0",
            ),
            (
                &["--max-tokens", "0"],
                "--max-tokens: must be a whole number from 1 to 4294967295, got 0",
            ),
            (
                &["--prompt-spread", "nan"],
                "--prompt-spread: must be a number from 0 to 100, got NaN",
            ),
            (
                &["--output-spread", "1e300"],
                "--output-spread: must be a number from 0 to 100, got 1e300",
            ),
        ];
        for (flags, want) in cases {
            let cli = Cli::try_parse_from(std::iter::once("simulate").chain(flags.iter().copied()))
                .expect("flags clap accepts");
            let failure = cli.args.check().expect_err("out of range");
            assert_eq!(failure.code(), 2, "{flags:?}");
            let message = failure.message();
            assert!(message.starts_with(want), "{flags:?}: {message}");
        }
        let defaults = Cli::try_parse_from(["simulate"]).expect("no flags");
        assert!(defaults.args.check().is_ok());
        let most = [
            "simulate",
            "--burstiness",
            "1000",
            "--latency-ms",
            "3600000",
            "--ms-per-token",
            "60000",
            "--max-tokens",
            "none",
        ];
        let most = Cli::try_parse_from(most).expect("valid flags");
        assert!(most.args.check().is_ok());
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("600"), Ok(600));
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("10m"), Ok(600));
        assert_eq!(parse_duration("1h"), Ok(3600));
        assert!(parse_duration("0").is_err());
        assert_eq!(parse_duration("8784h"), Ok(MAX_DURATION_SECS));
        let long = parse_duration("99999999999999999");
        assert!(
            long.as_ref().is_err_and(|e| e.contains("at most a year")),
            "{long:?}"
        );
        assert!(parse_duration("8785h").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("m").is_err());
    }
}

/// `--max-tokens`: a number, or `none`.
#[derive(Debug, Clone, Copy)]
struct MaxTokens(Option<u64>);

fn max_tokens_arg(value: &str) -> Result<MaxTokens, String> {
    if value == "none" {
        return Ok(MaxTokens(None));
    }
    value
        .parse::<u64>()
        .map(|n| MaxTokens(Some(n)))
        .map_err(|_| format!("expected a whole number of tokens or `none`, got {value:?}"))
}
