//! `llmroute keys new --tenant NAME` and `llmroute keys admin`: a new random key printed once
//! with the line that adds its hash to the configuration (the key itself is never stored).

use std::io::Write;

use anyhow::anyhow;

use crate::failure::Failure;

/// A new key for `tenant`, and its line for `gateway.keys`.
pub(super) fn new(tenant: &str, out: &mut dyn Write) -> Result<(), Failure> {
    // What the configuration accepts; the line below quotes the name, so that any of them
    // (`@ops`, `a: b`, `null`) loads as written.
    if let Some(problem) = router_core::config::tenant_name_problem(tenant) {
        return Err(Failure::usage(anyhow!("--tenant: {problem}")));
    }
    // A JSON string is a YAML double-quoted scalar.
    let quoted = serde_json::Value::from(tenant).to_string();
    let key = drawn()?;
    let hash = router_gateway::hash_key(&key);
    writeln!(
        out,
        "key: {key}\n\nGive the key to tenant `{tenant}`; it is not stored anywhere and is shown \
         only now. Add this line under `gateway.keys` in the configuration:\n\n    - {{ sha256: \
         {hash}, tenant: {quoted} }}\n\n(`llmroute keys create --tenant NAME` keeps it in the \
         shared key store instead, where it can be rotated and revoked without a restart.)"
    )
    .map_err(Failure::output)
}

/// A new admin key, and its line for `gateway.admin_keys`.
pub(super) fn admin(out: &mut dyn Write) -> Result<(), Failure> {
    let key = drawn()?;
    let hash = router_gateway::hash_key(&key);
    writeln!(
        out,
        "admin key: {key}\n\nIt opens /admin/v1 and /ui (as the password of the browser's \
         prompt); it is not stored anywhere and is shown only now. Add its hash under \
         `gateway.admin_keys` in the configuration:\n\n  admin_keys:\n    - {hash}\n\nor give \
         the key itself to the gateway in LLMROUTE_ADMIN_KEY."
    )
    .map_err(Failure::output)
}

fn drawn() -> Result<String, Failure> {
    router_gateway::new_key().map_err(|e| Failure::usage(anyhow!("cannot draw a random key: {e}")))
}
