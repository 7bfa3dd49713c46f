//! How much memory the process may use (the container's limit, as the CPU count and
//! the file limit are read from theirs), and sizes written by operators (`64MiB`).

use std::path::Path;

/// The share of the memory limit the gRPC port may hold by default: the rest is
/// msgw's own (runtime, store, sandbox, the send path's queues) and the allocator's.
pub const GRPC_SHARE: u64 = 4;

/// The memory this process may use, and where msgw read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Bytes.
    pub bytes: u64,
    /// Where it was read: the file of a cgroup, or `/proc/meminfo` (the machine).
    pub from: String,
}

/// Where cgroup v2 may be mounted: alone, or beside v1 (a hybrid host).
const V2_MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Where cgroup v1's memory controller is mounted.
const V1_MEMORY_MOUNT: &str = "/sys/fs/cgroup/memory";

/// The memory this process may use, and where it was read: its own cgroup's limit (v2
/// `memory.max`, else v1 `memory.limit_in_bytes` of the group `/proc/self/cgroup`
/// names), else the machine's memory; `None` when neither can be read.
pub fn find() -> Option<Limit> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let v2 = V2_MOUNTS.iter().map(Path::new);
    own_cgroup_limit(v2, Path::new(V1_MEMORY_MOUNT), &own).or_else(|| {
        let bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| mem_total(&m))?;
        Some(Limit {
            bytes,
            from: "/proc/meminfo (the machine; no cgroup memory limit)".into(),
        })
    })
}

/// The groups of a process as `/proc/<pid>/cgroup` names them: its cgroup v2 group
/// (the `0::` line) and its cgroup v1 memory group (the line whose controllers
/// include `memory`), as paths below their mounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnGroups {
    /// The v2 group.
    pub v2: Option<String>,
    /// The v1 memory group.
    pub v1_memory: Option<String>,
}

impl OwnGroups {
    /// Reads the text of `/proc/self/cgroup` (`hierarchy-ID:controllers:path` lines).
    pub fn parse(text: &str) -> Self {
        let mut groups = Self::default();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                groups.v2 = Some(path.to_owned());
            } else if controllers.split(',').any(|c| c == "memory") {
                groups.v1_memory = Some(path.to_owned());
            }
        }
        groups
    }
}

/// The limit of the process whose `/proc/self/cgroup` reads `own`: the lowest limit
/// of its v2 group and the groups above it under the first of `v2_mounts` that has
/// them, else of its v1 memory group and those above it under `v1_mount`. A group's
/// path outside the mount (a container that sees the host's path, not its own
/// namespace's) finds the groups that are there, down to the mount's root.
pub fn own_cgroup_limit<'a>(
    v2_mounts: impl IntoIterator<Item = &'a Path>,
    v1_mount: &Path,
    own: &str,
) -> Option<Limit> {
    let groups = OwnGroups::parse(own);
    if let Some(group) = &groups.v2 {
        for mount in v2_mounts {
            if let Some(found) = lowest(mount, group, "memory.max", "cgroup v2") {
                return Some(found);
            }
        }
    }
    let group = groups.v1_memory.as_deref()?;
    lowest(v1_mount, group, "memory.limit_in_bytes", "cgroup v1")
}

/// The lowest limit in `file` of `group` and each group above it under `mount`.
fn lowest(mount: &Path, group: &str, file: &str, kind: &str) -> Option<Limit> {
    // Only plain names: the path comes from the kernel, but nothing leaves the mount.
    let names: Vec<&str> = group
        .split('/')
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .collect();
    (0..=names.len())
        .filter_map(|depth| {
            let path = names[..depth]
                .iter()
                .fold(mount.to_path_buf(), |p, n| p.join(n))
                .join(file);
            let bytes = read_limit(&path)?;
            Some(Limit {
                bytes,
                from: format!("{kind} {}", path.display()),
            })
        })
        .min_by_key(|l| l.bytes)
}

/// A limit file's value; `None` for none (`max`, or v1's "no limit", a value near
/// `i64::MAX`) or no such file.
fn read_limit(path: &Path) -> Option<u64> {
    let bytes: u64 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    // v1 writes "no limit" as the largest page-aligned i64.
    (bytes < 1 << 62).then_some(bytes)
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
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

    /// `/proc/self/cgroup` of a process in v1 memory group `/msgw-test` on a hybrid host.
    const HYBRID: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/msgw-test\n2:cpu,cpuacct:/\n0::/\n";

    #[test]
    fn reads_its_own_groups_from_proc_self_cgroup() {
        assert_eq!(
            OwnGroups::parse(HYBRID),
            OwnGroups {
                v2: Some("/".into()),
                v1_memory: Some("/msgw-test".into()),
            }
        );
        let v2 = OwnGroups::parse("0::/kubepods.slice/pod1/cri-abc\n");
        assert_eq!(v2.v2.as_deref(), Some("/kubepods.slice/pod1/cri-abc"));
        assert_eq!(v2.v1_memory, None);
        // Several controllers on one line, and lines that are not lines of it.
        let v1 = OwnGroups::parse("garbage\n5:cpuacct,memory:/docker/abc\n\n");
        assert_eq!(v1.v1_memory.as_deref(), Some("/docker/abc"));
        assert_eq!(OwnGroups::parse(""), OwnGroups::default());
    }

    #[test]
    fn finds_the_v1_limit_of_its_own_group_not_the_roots() {
        let mount = root_with("memory.limit_in_bytes", "9223372036854771712\n");
        std::fs::create_dir_all(mount.path().join("msgw-test")).unwrap();
        std::fs::write(
            mount.path().join("msgw-test/memory.limit_in_bytes"),
            "268435456\n",
        )
        .unwrap();
        let none = tempfile::tempdir().unwrap();
        let found = own_cgroup_limit([none.path()], mount.path(), HYBRID).unwrap();
        assert_eq!(found.bytes, 256 << 20);
        assert!(
            found.from.starts_with("cgroup v1 ")
                && found.from.ends_with("msgw-test/memory.limit_in_bytes"),
            "{}",
            found.from
        );
        // A parent's lower limit binds the group too.
        std::fs::write(mount.path().join("memory.limit_in_bytes"), "134217728\n").unwrap();
        let found = own_cgroup_limit([none.path()], mount.path(), HYBRID).unwrap();
        assert_eq!(found.bytes, 128 << 20);
        // A path from outside the mount's namespace finds the mount's root.
        let outside = "4:memory:/docker/abc/../x\n";
        let found = own_cgroup_limit([none.path()], mount.path(), outside).unwrap();
        assert_eq!(found.bytes, 128 << 20);
        // Without a limit anywhere: none.
        let unlimited = root_with("memory.limit_in_bytes", "9223372036854771712\n");
        assert_eq!(
            own_cgroup_limit([none.path()], unlimited.path(), HYBRID),
            None
        );
    }

    #[test]
    fn a_v2_limit_comes_first() {
        let v2 = root_with("pod/memory.max", "536870912\n");
        std::fs::write(v2.path().join("memory.max"), "max\n").unwrap();
        let v1 = root_with("pod/memory.limit_in_bytes", "268435456\n");
        let own = "4:memory:/pod\n0::/pod\n";
        let found = own_cgroup_limit([v2.path()], v1.path(), own).unwrap();
        assert_eq!(found.bytes, 512 << 20);
        assert!(found.from.starts_with("cgroup v2 "), "{}", found.from);
        // `max` everywhere in v2: the v1 group's.
        std::fs::write(v2.path().join("pod/memory.max"), "max\n").unwrap();
        let found = own_cgroup_limit([v2.path()], v1.path(), own).unwrap();
        assert_eq!(found.bytes, 256 << 20);
    }

    #[test]
    fn reads_the_machines_memory() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:        1000 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }
}
