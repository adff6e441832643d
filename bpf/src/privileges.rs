//! What the profiler needs from the kernel before it tries to load anything:
//! effective capabilities (from `/proc/self/status` `CapEff`) and a readable
//! `/proc`. The parsing and the decision are pure functions, tested with fake
//! inputs.

use crate::BpfError;

/// Capability bit numbers (include/uapi/linux/capability.h).
pub(crate) const CAP_SYS_PTRACE: u32 = 19;
pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_SYS_RESOURCE: u32 = 24;
pub(crate) const CAP_PERFMON: u32 = 38;
pub(crate) const CAP_BPF: u32 = 39;

/// The least-privilege set, in the order the error names them. `CAP_SYS_ADMIN`
/// (root) stands in for all of them. `CAP_SYS_RESOURCE` is only needed where
/// BPF memory counts against RLIMIT_MEMLOCK (kernels before 5.11).
const NEEDED: [(u32, &str); 4] = [
    (CAP_BPF, "CAP_BPF"),
    (CAP_PERFMON, "CAP_PERFMON"),
    (CAP_SYS_PTRACE, "CAP_SYS_PTRACE"),
    (CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"),
];

/// Kernels from 5.11 on charge BPF maps to the memory cgroup, not RLIMIT_MEMLOCK.
const MEMCG_ACCOUNTING: (u32, u32) = (5, 11);

/// Name used in the missing list when `/proc` cannot be read.
pub(crate) const PROC_UNREADABLE: &str = "readable /proc";

/// The `CapEff` mask from the text of `/proc/<pid>/status`.
pub(crate) fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// `(major, minor)` of a kernel release string such as `6.18.44-fc-v509`.
pub(crate) fn parse_kernel_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Whether BPF memory counts against RLIMIT_MEMLOCK here (so raising it, with
/// CAP_SYS_RESOURCE, is needed). An unknown kernel is taken as an old one.
fn memlock_counts() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| parse_kernel_release(&r))
        .is_none_or(|version| version < MEMCG_ACCOUNTING)
}

/// What is missing for the profiler, given the effective capability mask,
/// whether `/proc` is readable and whether the kernel charges BPF memory to
/// RLIMIT_MEMLOCK. Empty when everything needed is there: either
/// `CAP_SYS_ADMIN` (root), or `CAP_BPF` + `CAP_PERFMON` + `CAP_SYS_PTRACE`,
/// plus `CAP_SYS_RESOURCE` when `memlock_counts`.
pub(crate) fn missing_privileges(
    cap_eff: u64,
    proc_readable: bool,
    memlock_counts: bool,
) -> Vec<&'static str> {
    let has = |bit: u32| cap_eff & (1u64 << bit) != 0;
    let mut missing: Vec<&'static str> = if has(CAP_SYS_ADMIN) {
        Vec::new()
    } else {
        NEEDED
            .iter()
            .filter(|(bit, _)| !has(*bit) && (*bit != CAP_SYS_RESOURCE || memlock_counts))
            .map(|(_, name)| *name)
            .collect()
    };
    if !proc_readable {
        missing.push(PROC_UNREADABLE);
    }
    missing
}

/// `/proc` is mounted and shows other processes (pid 1 at least): without it
/// user space cannot map sample pids to executables.
fn proc_readable() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok() && std::fs::read("/proc/1/stat").is_ok()
}

/// Checks the calling process's privileges; see [`crate::Profiler::start`].
pub fn check_privileges() -> Result<(), BpfError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    // An unreadable status leaves the mask at 0: every capability is then reported missing.
    let cap_eff = parse_cap_eff(&status).unwrap_or(0);
    let missing = missing_privileges(cap_eff, proc_readable(), memlock_counts());
    if missing.is_empty() {
        Ok(())
    } else {
        Err(BpfError::MissingPrivileges { missing })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT_STATUS: &str = "Name:\tprofcol\nUmask:\t0022\nState:\tR (running)\nCapInh:\t0000000000000000\n\
        CapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";

    fn caps(bits: &[u32]) -> u64 {
        bits.iter().fold(0, |m, b| m | (1 << b))
    }

    #[test]
    fn parses_cap_eff_from_status_text() {
        assert_eq!(parse_cap_eff(ROOT_STATUS), Some(0x1ff_ffff_ffff));
        assert_eq!(
            parse_cap_eff("CapEff:\t00000000a80425fb\n"),
            Some(0xa804_25fb)
        );
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
    }

    #[test]
    fn parses_kernel_releases() {
        assert_eq!(parse_kernel_release("6.18.44-fc-v509\n"), Some((6, 18)));
        assert_eq!(parse_kernel_release("5.10.0-28-amd64"), Some((5, 10)));
        assert_eq!(parse_kernel_release("5.11"), Some((5, 11)));
        assert_eq!(parse_kernel_release("linux"), None);
    }

    #[test]
    fn root_needs_nothing_more() {
        let root = parse_cap_eff(ROOT_STATUS).expect("CapEff");
        assert!(missing_privileges(root, true, true).is_empty());
        // CAP_SYS_ADMIN alone stands in for the least-privilege set.
        assert!(missing_privileges(caps(&[CAP_SYS_ADMIN]), true, true).is_empty());
    }

    #[test]
    fn least_privilege_set_is_enough() {
        let set = caps(&[CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_SYS_RESOURCE]);
        assert!(missing_privileges(set, true, true).is_empty());
        // With memcg accounting (5.11+) the memlock limit does not matter.
        let set = caps(&[CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE]);
        assert!(missing_privileges(set, true, false).is_empty());
        assert_eq!(
            missing_privileges(set, true, true),
            vec!["CAP_SYS_RESOURCE"]
        );
    }

    #[test]
    fn names_exactly_what_is_missing() {
        // Docker's default set (0xa80425fb): none of the four.
        assert_eq!(
            missing_privileges(0xa804_25fb, true, true),
            vec![
                "CAP_BPF",
                "CAP_PERFMON",
                "CAP_SYS_PTRACE",
                "CAP_SYS_RESOURCE"
            ]
        );
        assert_eq!(
            missing_privileges(0xa804_25fb, true, false),
            vec!["CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"]
        );
        assert_eq!(
            missing_privileges(caps(&[CAP_BPF, CAP_SYS_PTRACE]), true, true),
            vec!["CAP_PERFMON", "CAP_SYS_RESOURCE"]
        );
        assert_eq!(
            missing_privileges(caps(&[CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE]), false, true),
            vec!["CAP_SYS_RESOURCE", PROC_UNREADABLE]
        );
        assert_eq!(
            missing_privileges(caps(&[CAP_SYS_ADMIN]), false, true),
            vec![PROC_UNREADABLE]
        );
        // This machine's sandbox: everything but CAP_SYS_RESOURCE.
        assert!(missing_privileges(0x1ff_feff_ffff, true, true).is_empty());
    }

    #[test]
    fn error_message_names_the_missing_capabilities() {
        let err = BpfError::MissingPrivileges {
            missing: missing_privileges(caps(&[CAP_BPF]), true, true),
        };
        let text = err.to_string();
        assert!(
            text.starts_with("missing privileges: CAP_PERFMON, CAP_SYS_PTRACE, CAP_SYS_RESOURCE;"),
            "{text}"
        );
    }
}
