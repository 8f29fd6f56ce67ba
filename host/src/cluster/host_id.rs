//! A host process's name in the store, which says enough for another
//! process on the same machine to tell at once whether it still runs.

use std::fmt;
use std::sync::OnceLock;

/// A host process: `{machine}.{pid}.{nonce}`, where `machine` names this
/// boot of this machine's kernel and its process-id namespace (so two
/// containers on one machine never read each other's pids), and `nonce`
/// tells apart two processes that got the same pid.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostId(String);

/// A host id that is not of the form `{machine}.{pid}.{nonce}`.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a host id (expected MACHINE.PID.NONCE)")]
pub struct InvalidHostId(String);

impl HostId {
    /// The id of this process, fresh each time it is asked for.
    pub fn fresh() -> Self {
        let nonce = uuid::Uuid::now_v7().simple().to_string();
        Self(format!(
            "{}.{}.{}",
            machine(),
            std::process::id(),
            &nonce[nonce.len() - 8..]
        ))
    }

    /// The id as written in the store: `{machine}.{pid}.{nonce}`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this host was a process of this machine, in this boot and
    /// pid namespace, that has exited: then it is dead without waiting for
    /// its lease to run out. (A process that is only stopped still runs.)
    pub fn process_gone(&self) -> bool {
        let mut parts = self.0.split('.');
        match (parts.next(), parts.next()) {
            (Some(its_machine), Some(pid)) if its_machine == machine() && proc_is_ours() => {
                !std::path::Path::new("/proc").join(pid).exists()
            }
            _ => false,
        }
    }
}

/// Whether `/proc` shows this process's own pid namespace: `/proc/self` is
/// this process. A `/proc` mounted from another namespace (a container
/// given the host's) lists other processes under the same numbers, so no
/// liveness may be read from it.
fn proc_is_ours() -> bool {
    static OURS: OnceLock<bool> = OnceLock::new();
    *OURS.get_or_init(|| {
        std::fs::read_link("/proc/self").is_ok_and(|me| me.as_os_str() == std::process::id().to_string().as_str())
    })
}

/// This boot of this machine in this pid namespace, from Linux's boot id
/// and the namespace's inode; elsewhere a value no other process shares,
/// so that no liveness is read from pids there.
fn machine() -> &'static str {
    static MACHINE: OnceLock<String> = OnceLock::new();
    MACHINE.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
        let namespace = std::fs::read_link("/proc/self/ns/pid").ok();
        match (boot, namespace) {
            (Some(boot), Some(namespace)) => {
                let digits = |text: &str| text.chars().filter(char::is_ascii_alphanumeric).collect::<String>();
                let boot = digits(&boot);
                format!(
                    "{}-{}",
                    &boot[..boot.len().min(12)],
                    digits(&namespace.to_string_lossy()).trim_start_matches("pid")
                )
            }
            _ => format!("nopids-{}", uuid::Uuid::now_v7().simple()),
        }
    })
}

/// One process under a host id, drawn from the operating system as the
/// process starts its host: two processes given one id (a cloned machine,
/// a successor started while the first was paused past its lease) write
/// heartbeats and claims that no other process could have written, so a
/// host tells its own from a twin's by this, never by the id alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Incarnation(u64);

impl Incarnation {
    /// A new incarnation, from the operating system's generator.
    pub fn draw() -> Self {
        use rand::TryRngCore;
        Self(rand::rngs::OsRng.try_next_u64().unwrap_or_else(|_| rand::random()))
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for Incarnation {
    type Err = std::num::ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(text, 16).map(Self)
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for HostId {
    type Error = InvalidHostId;

    fn try_from(id: String) -> Result<Self, InvalidHostId> {
        let parts: Vec<&str> = id.split('.').collect();
        let valid = parts.len() == 3
            && parts
                .iter()
                .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
            && parts[1].parse::<u32>().is_ok();
        if valid { Ok(Self(id)) } else { Err(InvalidHostId(id)) }
    }
}

impl From<HostId> for String {
    fn from(id: HostId) -> String {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_finished_one_does_not() {
        let me = HostId::fresh();
        assert!(!me.process_gone(), "{me}");
        let mut child = std::process::Command::new("true").spawn().expect("`true` runs");
        let pid = child.id();
        child.wait().expect("`true` exits");
        let gone = HostId::try_from(format!("{}.{pid}.abc", machine())).expect("a valid id");
        assert!(gone.process_gone(), "{gone}");
    }

    #[test]
    fn another_machines_host_is_never_judged_by_its_pid() {
        let elsewhere = HostId::try_from(format!("another-machine.{}.abc", std::process::id())).expect("a valid id");
        assert!(!elsewhere.process_gone());
        let gone_elsewhere = HostId::try_from("another-machine.4000000.abc".to_owned()).expect("a valid id");
        assert!(!gone_elsewhere.process_gone());
    }

    /// Run again under `unshare --pid --fork` (a pid namespace of its own,
    /// with the `/proc` of the one it came from), this test finds that
    /// `/proc` is not its own and judges no host of its machine gone by it.
    #[test]
    fn a_proc_of_another_pid_namespace_is_never_read() {
        const INSIDE: &str = "STEPSTONE_TEST_IN_A_NEW_PID_NAMESPACE";
        let gone = HostId::try_from(format!("{}.4000000.abc", machine())).expect("a valid id");
        if std::env::var_os(INSIDE).is_some() {
            assert!(!proc_is_ours(), "/proc is the parent namespace's");
            assert!(!gone.process_gone(), "{gone} judged by a /proc of another namespace");
            return;
        }
        assert!(proc_is_ours() && gone.process_gone(), "{gone}: this namespace's /proc is read");
        let test = "cluster::host_id::tests::a_proc_of_another_pid_namespace_is_never_read";
        let inside = std::process::Command::new("unshare")
            .args(["--pid", "--fork"])
            .arg(std::env::current_exe().expect("the test binary"))
            .args(["--exact", test])
            .env(INSIDE, "1")
            .output()
            .expect("unshare(1) runs: install util-linux");
        let said = String::from_utf8_lossy(&inside.stdout);
        assert!(
            inside.status.success() && said.contains("1 passed"),
            "inside a new pid namespace (unshare needs root or CAP_SYS_ADMIN): {said}{}",
            String::from_utf8_lossy(&inside.stderr)
        );
    }

    #[test]
    fn incarnations_are_drawn_apart_and_read_back() {
        let (one, another) = (Incarnation::draw(), Incarnation::draw());
        assert_ne!(one, another);
        assert_eq!(one.to_string().parse::<Incarnation>().expect("hex"), one);
        assert!("not hex".parse::<Incarnation>().is_err());
    }

    #[test]
    fn ids_round_trip_and_junk_is_refused() {
        let me = HostId::fresh();
        assert_eq!(HostId::try_from(me.to_string()).expect("own id parses"), me);
        for junk in ["", "a.b", "a.1", "a.x.c", "a/b.1.c", "a.1.c.d", "../x.1.c"] {
            assert!(HostId::try_from(junk.to_owned()).is_err(), "{junk:?} accepted");
        }
    }
}
