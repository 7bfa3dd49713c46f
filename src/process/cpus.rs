//! How many CPUs the container may use: the cgroup CPU quota, so a pod limited to
//! 2 CPUs on a 64-core node runs 2 tokio workers, not 64.

use std::path::Path;

/// Worker threads for this process: the cgroup quota rounded up, at most the
/// machine's CPUs, at least 1.
pub fn worker_threads() -> usize {
    let machine = std::thread::available_parallelism().map_or(1, usize::from);
    cgroup_limit(Path::new("/sys/fs/cgroup")).map_or(machine, |limit| limit.clamp(1, machine))
}

/// The CPU limit of the cgroup mounted at `root` (v2 `cpu.max`, else v1 CFS quota).
pub fn cgroup_limit(root: &Path) -> Option<usize> {
    if let Ok(max) = std::fs::read_to_string(root.join("cpu.max")) {
        let mut parts = max.split_whitespace();
        let (quota, period) = (parts.next()?, parts.next()?);
        return cpus(quota, period);
    }
    let quota = std::fs::read_to_string(root.join("cpu/cpu.cfs_quota_us")).ok()?;
    let period = std::fs::read_to_string(root.join("cpu/cpu.cfs_period_us")).ok()?;
    cpus(quota.trim(), period.trim())
}

/// `quota/period` rounded up; `None` for no limit (`max` or -1).
fn cpus(quota: &str, period: &str) -> Option<usize> {
    let quota: u64 = quota.parse().ok()?;
    let period: u64 = period.parse().ok().filter(|p| *p > 0)?;
    usize::try_from(quota.div_ceil(period)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        dir
    }

    #[test]
    fn reads_cgroup_v2_quota() {
        assert_eq!(
            cgroup_limit(root_with(&[("cpu.max", "200000 100000\n")]).path()),
            Some(2)
        );
        assert_eq!(
            cgroup_limit(root_with(&[("cpu.max", "150000 100000\n")]).path()),
            Some(2),
            "1.5 CPUs round up"
        );
        assert_eq!(
            cgroup_limit(root_with(&[("cpu.max", "max 100000\n")]).path()),
            None
        );
    }

    #[test]
    fn reads_cgroup_v1_quota() {
        let v1 = root_with(&[
            ("cpu/cpu.cfs_quota_us", "50000\n"),
            ("cpu/cpu.cfs_period_us", "100000\n"),
        ]);
        assert_eq!(cgroup_limit(v1.path()), Some(1));
        let unlimited = root_with(&[
            ("cpu/cpu.cfs_quota_us", "-1\n"),
            ("cpu/cpu.cfs_period_us", "100000\n"),
        ]);
        assert_eq!(cgroup_limit(unlimited.path()), None);
        assert_eq!(cgroup_limit(Path::new("/nonexistent")), None);
    }
}
