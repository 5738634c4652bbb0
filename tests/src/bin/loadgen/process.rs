//! Another process's CPU time and resident memory, from Linux's `/proc`.

use std::time::Duration;

/// `/proc/PID/stat` counts CPU time in ticks of `USER_HZ`, which Linux fixes at 100 a second
/// (on every architecture but Alpha).
const TICKS_PER_SEC: u64 = 100;

/// The user plus system CPU time `pid` has used so far, its exited threads included.
pub(crate) fn cpu(pid: u32) -> Result<Duration, String> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    cpu_of(&text).ok_or_else(|| format!("{path}: no utime and stime in it"))
}

/// utime + stime from the text of `/proc/PID/stat` (fields 14 and 15; the command name, field
/// 2, is in parentheses and may hold spaces).
fn cpu_of(stat: &str) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis(
        (utime + stime) * 1000 / TICKS_PER_SEC,
    ))
}

/// `pid`'s resident memory (VmRSS) in KiB.
pub(crate) fn rss_kib(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    text.lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{path}: no VmRSS in it"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_read_past_a_name_with_spaces() {
        let stat = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 3 0 1 2 3";
        assert_eq!(cpu_of(stat), Some(Duration::from_millis(1750)));
        assert_eq!(cpu_of("42 (x) S 1"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let me = std::process::id();
        assert!(cpu(me).is_ok());
        assert!(rss_kib(me).expect("VmRSS") > 0);
        assert!(cpu(u32::MAX).is_err());
    }
}
