//! `llmroute simulate --html FILE`: writes the simulation page to a file.
//!
//! The page is one self-contained HTML file: inline CSS and inline SVG, no script and no
//! external asset. [`escape`] makes any text safe to put in it.

use std::path::Path;

use anyhow::anyhow;
use router_sim::SimReport;

use super::page;

/// Writes the page of `report` to `path`. An error names the path and says what to do.
pub(super) fn write(path: &Path, report: &SimReport) -> anyhow::Result<()> {
    let html = page::build(report);
    std::fs::write(path, html).map_err(|e| {
        anyhow!(
            "--html {}: cannot write the simulation page: {e}; pass a file in an existing \
             directory this user can write",
            path.display()
        )
    })
}

/// `text` with the characters that mean something in HTML replaced by their entities, safe
/// in element content and in quoted attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use router_core::config::Registry;
    use router_sim::Profile;

    /// A configuration whose cheapest deployment has a name full of HTML, a middle one that
    /// limits input and output tokens apart, and a dear one without limits.
    const YAML: &str = r#"
defaults: { model: chat }
providers:
  - name: 'cheap<b>&"'
    api: openai
    base_url: http://localhost/v1
    api_key_env: CHEAP_KEY
    models:
      - { name: small, aliases: [chat], price: { input: 0.1, output: 0.4 }, limits: { rpm: 120, tpm: 300000 } }
  - name: mid
    api: anthropic
    base_url: http://localhost
    api_key_env: MID_KEY
    models:
      - { name: medium, aliases: [chat], price: { input: 1, output: 5 }, limits: { rpm: 60, itpm: 90000, otpm: 30000 } }
  - name: dear
    api: gemini
    base_url: http://localhost
    api_key_env: DEAR_KEY
    models:
      - { name: large, aliases: [chat], price: { input: 3, output: 15 } }
"#;

    /// Five minutes at 5 requests a second: more than the cheapest deployment's 120 a minute.
    fn report() -> SimReport {
        let registry = Registry::from_yaml_str(YAML, "page.yaml").expect("valid test config");
        let profile = Profile {
            rps: 5.0,
            duration_secs: 300,
            ..Profile::default()
        };
        router_sim::run(&registry, &profile).expect("the simulation runs")
    }

    #[test]
    fn the_page_is_written_self_contained_with_every_deployment_and_the_baselines() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("sim.html");
        let report = report();
        write(&path, &report).expect("the page is written");
        let page = std::fs::read_to_string(&path).expect("the page reads back");
        assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
        assert!(page.contains("<title>SIMULATION"), "{page}");
        assert!(page.contains("no requests were sent"));
        assert!(
            page.contains("--rps 5 --duration 300s"),
            "the flags of the run"
        );
        for name in [
            "cheap&lt;b&gt;&amp;&quot;/small",
            "mid/medium",
            "dear/large",
        ] {
            assert!(page.contains(name), "no {name}");
        }
        let b = &report.baselines;
        assert!(b.most_expensive.cost_usd > b.cheapest.cost_usd, "{b:?}");
        for usd in [
            report.totals.cost_usd,
            b.cheapest.cost_usd,
            b.most_expensive.cost_usd,
        ] {
            assert!(page.contains(&format!("${usd:.4}")), "no ${usd:.4}");
        }
        assert!(page.contains("(cheapest") && page.contains("(most expensive)"));
        // A chart per dimension: rpm and tpm for the cheapest, input and output for `mid`.
        for id in [
            "id=\"overflow\"",
            "id=\"cost\"",
            "id=\"d0-tpm\"",
            "id=\"d1-itpm\"",
            "id=\"d1-otpm\"",
        ] {
            assert!(page.contains(id), "no {id}");
        }
        assert!(page.matches("<svg").count() >= 8);
        assert!(
            page.contains("limit 120"),
            "the rpm limit drawn and labelled"
        );
        let lower = page.to_lowercase();
        for banned in ["<script", "http://", "https://", "<link", "@import", "<img"] {
            assert!(!lower.contains(banned), "the page holds {banned}");
        }
    }

    #[test]
    fn a_name_full_of_html_is_escaped_everywhere() {
        let page = page::build(&report());
        assert!(!page.contains("<b>"), "an unescaped name");
        assert!(!page.contains("&\""), "an unescaped ampersand or quote");
        let escaped = page.matches("cheap&lt;b&gt;&amp;&quot;/small").count();
        // Its heading, charts and table rows, the stacked chart's label and the cost baseline.
        assert!(escaped >= 6, "{escaped} times");
    }

    #[test]
    fn a_path_in_a_missing_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("missing").join("sim.html");
        let err = write(&path, &report()).expect_err("no such directory");
        let message = err.to_string();
        let named = format!(
            "--html {}: cannot write the simulation page",
            path.display()
        );
        assert!(message.starts_with(&named), "{message}");
        assert!(message.contains("existing directory"), "{message}");
        assert!(!path.exists());
    }

    #[test]
    fn escape_replaces_every_special_character() {
        assert_eq!(
            escape(r#"<b>&"x"'y'</b>"#),
            "&lt;b&gt;&amp;&quot;x&quot;&#39;y&#39;&lt;/b&gt;"
        );
        assert_eq!(escape("openai/gpt-4o-mini"), "openai/gpt-4o-mini");
    }
}
