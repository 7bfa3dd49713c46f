//! How much memory the process may use (the container's limit, as the CPU count and
//! the file limit are read from theirs), and sizes written by operators (`64MiB`).

use std::path::Path;

/// The share of the memory limit the gRPC port may hold by default: the rest is
/// msgw's own (runtime, store, sandbox, the send path's queues) and the allocator's.
pub const GRPC_SHARE: u64 = 4;

/// The memory this process may use: the cgroup's limit (v2 `memory.max`, else v1
/// `memory.limit_in_bytes`), else the machine's memory; `None` when neither can be
/// read.
pub fn limit() -> Option<u64> {
    cgroup_limit(Path::new("/sys/fs/cgroup")).or_else(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| mem_total(&m))
    })
}

/// The memory limit of the cgroup mounted at `root`; `None` for none (`max`, or v1's
/// "no limit", a value near `i64::MAX`).
pub fn cgroup_limit(root: &Path) -> Option<u64> {
    let raw = std::fs::read_to_string(root.join("memory.max"))
        .or_else(|_| std::fs::read_to_string(root.join("memory/memory.limit_in_bytes")))
        .ok()?;
    let bytes: u64 = raw.trim().parse().ok()?;
    // v1 writes "no limit" as the largest page-aligned i64.
    (bytes < 1 << 62).then_some(bytes)
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// A size in bytes: a number with an optional unit (`B`, `KiB`, `MiB`, `GiB`, or `KB`,
/// `MB`, `GB` in powers of ten), e.g. `64MiB`; at least 1 MiB.
pub fn parse_size(value: &str) -> Result<u64, String> {
    const EXAMPLE: &str = "expected a size such as 64MiB, 512MB or 1GiB";
    let value = value.trim();
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(split);
    let unit_bytes: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "Ki" => 1 << 10,
        "MiB" | "Mi" => 1 << 20,
        "GiB" | "Gi" => 1 << 30,
        "KB" | "K" => 1_000,
        "MB" | "M" => 1_000_000,
        "GB" | "G" => 1_000_000_000,
        other => return Err(format!("unknown unit {other:?}: {EXAMPLE}")),
    };
    let n: u64 = digits.parse().map_err(|_| EXAMPLE.to_owned())?;
    let bytes = n
        .checked_mul(unit_bytes)
        .ok_or_else(|| format!("too large: {EXAMPLE}"))?;
    if bytes < 1 << 20 {
        return Err(format!("must be at least 1MiB: {EXAMPLE}"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(name: &str, content: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
        dir
    }

    #[test]
    fn reads_the_cgroup_v2_and_v1_limits() {
        let v2 = root_with("memory.max", "268435456\n");
        assert_eq!(cgroup_limit(v2.path()), Some(256 << 20));
        assert_eq!(cgroup_limit(root_with("memory.max", "max\n").path()), None);
        let v1 = root_with("memory/memory.limit_in_bytes", "536870912\n");
        assert_eq!(cgroup_limit(v1.path()), Some(512 << 20));
        let unlimited = root_with("memory/memory.limit_in_bytes", "9223372036854771712\n");
        assert_eq!(cgroup_limit(unlimited.path()), None);
        assert_eq!(cgroup_limit(tempfile::tempdir().unwrap().path()), None);
    }

    #[test]
    fn reads_the_machines_memory() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:        1000 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn parses_sizes_with_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64Mi"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512MB"), Ok(512_000_000));
        assert_eq!(parse_size("2097152"), Ok(2 << 20));
        assert!(parse_size("1KiB").unwrap_err().contains("at least 1MiB"));
        assert!(parse_size("64 bananas").unwrap_err().contains("64MiB"));
        assert!(parse_size("").is_err());
        assert!(parse_size("-5MiB").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
    }
}
