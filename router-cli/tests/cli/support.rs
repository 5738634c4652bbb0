//! Running `llmroute` in tests: a clean environment, exit-status checks, temporary files.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::cargo::cargo_bin_cmd;

/// The documented example at the repository root.
pub fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../providers.yaml")
}

/// `llmroute` with none of the variables it reads inherited from the test's environment.
pub fn llmroute() -> assert_cmd::Command {
    let mut cmd = cargo_bin_cmd!("llmroute");
    for var in [
        "LLMROUTE_CONFIG",
        "REDIS_URL",
        "DEEPSEEK_API_KEY",
        "OPENAI_API_KEY",
        "LLMROUTE_STATE_DIR",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Run and require exit status `code`; returns (stdout, stderr).
#[track_caller]
pub fn run(cmd: &mut assert_cmd::Command, code: i32) -> (String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let (stdout, stderr) = (text(&stdout), text(&stderr));
    assert_eq!(
        status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// A file `name` holding `yaml` in a fresh temporary directory (kept alive by the return value).
pub fn config_file(name: &str, yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    (dir, path)
}

/// A fixture of the SDK's wire-format fixtures.
pub fn fixture(path: &str) -> Vec<u8> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../router-sdk/tests/fixtures")
        .join(path);
    std::fs::read(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// A test's world: a temporary directory holding the configuration and the embedded ledger.
pub struct Scene {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

/// Upstreams as `(name, api, base url, model, input price, output price, limits)`, all serving
/// alias `chat`; keys in `<NAME>_KEY`.
pub fn scene(upstreams: &[(&str, &str, String, &str, f64, f64, &str)]) -> Scene {
    scene_with(upstreams, "")
}

/// [`scene`] with `extra` YAML (say, `tenants:`) appended to the configuration.
pub fn scene_with(upstreams: &[(&str, &str, String, &str, f64, f64, &str)], extra: &str) -> Scene {
    let mut yaml = format!(
        "namespace: cli-{:x}\ndefaults:\n  model: chat\n  output_tokens: 50\nproviders:\n",
        std::process::id() as u64 ^ fastrand_seed()
    );
    for (name, api, base, model, pin, pout, limits) in upstreams {
        yaml.push_str(&format!(
            "  - name: {name}\n    api: {api}\n    base_url: {base}\n    api_key_env: {}_KEY\n    models:\n      - name: {model}\n        aliases: [chat]\n        price: {{ input: {pin}, output: {pout} }}\n        limits: {{ {limits} }}\n",
            name.to_uppercase()
        ));
    }
    yaml.push_str(extra);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("providers.yaml");
    std::fs::write(&config, yaml).unwrap();
    Scene { dir, config }
}

fn fastrand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

impl Scene {
    /// `llmroute --config <scene config>` with this scene's embedded store and keys set.
    pub fn llmroute(&self, keys: &[&str]) -> assert_cmd::Command {
        let mut cmd = llmroute();
        cmd.arg("--config")
            .arg(&self.config)
            .env("LLMROUTE_STATE_DIR", self.dir.path().join("state"));
        for name in keys {
            cmd.env(
                format!("{}_KEY", name.to_uppercase()),
                format!("sk-planted-{name}-S3CRET"),
            );
        }
        cmd
    }

    /// A prompt file in the scene.
    pub fn prompt(&self, text: &str) -> PathBuf {
        let path = self.dir.path().join("prompt.txt");
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// Runs a command off the async runtime (the mock servers keep serving meanwhile) and requires
/// exit status `code`.
pub async fn run_async(mut cmd: assert_cmd::Command, code: i32) -> (String, String) {
    tokio::task::spawn_blocking(move || run(&mut cmd, code))
        .await
        .unwrap()
}

/// A scene with one OpenAI-compatible upstream `oa` serving `gpt-test` ($2 / $8 per Mtok) with
/// `limits`, and its mock server.
pub async fn openai_scene(limits: &str) -> (Scene, wiremock::MockServer) {
    let server = wiremock::MockServer::start().await;
    let base = format!("{}/v1", server.uri());
    (
        scene(&[("oa", "openai", base, "gpt-test", 2.0, 8.0, limits)]),
        server,
    )
}

impl Scene {
    /// `llmroute --config <scene config> ARGS` as a process of its own (to be signalled): none
    /// of the variables it reads inherited, this scene's embedded store, the key of upstream
    /// `oa` planted, standard output and error piped.
    pub fn process(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin!("llmroute"));
        for var in ["LLMROUTE_CONFIG", "REDIS_URL", "RUST_LOG"] {
            cmd.env_remove(var);
        }
        cmd.arg("--config")
            .arg(&self.config)
            .env("LLMROUTE_STATE_DIR", self.dir.path().join("state"))
            .env("OA_KEY", "sk-planted-oa-S3CRET")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    }
}

/// The base URL `llmroute serve` prints on its first line (`llmroute gateway listening on
/// BASE`), read from `child`'s piped standard output.
pub fn listening_on(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut first = String::new();
    let stdout = child.stdout.as_mut().expect("standard output is piped");
    std::io::BufReader::new(stdout)
        .read_line(&mut first)
        .unwrap();
    first
        .trim()
        .strip_prefix("llmroute gateway listening on ")
        .unwrap_or_else(|| panic!("{first:?}"))
        .to_owned()
}

/// Sends `SIG<signal>` (`TERM`, `INT`, ...) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// Waits, off the async runtime, for `child` to exit, and returns its output; fails the test
/// (and kills the process) if it has not exited within a minute.
pub async fn exited(mut child: std::process::Child) -> Output {
    use wait_timeout::ChildExt;
    tokio::task::spawn_blocking(move || {
        let limit = std::time::Duration::from_secs(60);
        if child.wait_timeout(limit).unwrap().is_none() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process did not exit within {limit:?}; killed");
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

/// `what`, or a failed test if it takes over a minute (a wait that would otherwise hang).
pub async fn within_a_minute<T>(
    what: impl std::future::Future<Output = T>,
    waiting_for: &str,
) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(60), what)
        .await
        .unwrap_or_else(|_| panic!("no {waiting_for} within a minute"))
}

/// A scene with one OpenAI-compatible upstream `oa` at `base` serving `gpt-test` (rpm 100,
/// concurrency 2), with `extra` YAML.
pub fn one_upstream_at(base: String, extra: &str) -> Scene {
    scene_with(
        &[(
            "oa",
            "openai",
            base,
            "gpt-test",
            2.0,
            8.0,
            "rpm: 100, concurrency: 2",
        )],
        extra,
    )
}
