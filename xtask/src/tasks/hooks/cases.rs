//! The cases: which agent set-up, client cgroup and destination, and what every connect
//! must end with.

/// A port nothing listens on in ext: connects to it are refused (the hook runs anyway).
pub const CLOSED_PORT: u16 = 9;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    Directory,
    KubeNamespace,
    KubeCluster,
    /// Directory, `--egress-policy deny`: the closed port is an undeclared destination.
    DirectoryDeny,
    /// Directory, `--egress-policy deny --allow-cidr <ext>/32`.
    DirectoryDenyAllowed,
}

impl Setup {
    pub fn label(self) -> &'static str {
        match self {
            Setup::Directory => "directory (cluster scope)",
            Setup::KubeNamespace => "Kubernetes, `--backend-scope namespace`",
            Setup::KubeCluster => "Kubernetes, `--backend-scope cluster`",
            Setup::DirectoryDeny => "directory, `--egress-policy deny`",
            Setup::DirectoryDenyAllowed => {
                "directory, `--egress-policy deny --allow-cidr` (the address)"
            }
        }
    }

    /// Extra `redirector run` flags of a directory set-up.
    pub fn egress_args(self) -> Vec<String> {
        let ext = format!("{}/32", xtask::netlab::EXT_V4);
        let args: &[&str] = match self {
            Setup::DirectoryDeny => &["--egress-policy", "deny"],
            Setup::DirectoryDenyAllowed => &["--egress-policy", "deny", "--allow-cidr", &ext],
            _ => &[],
        };
        args.iter().map(|a| a.to_string()).collect()
    }
}

/// The cgroup the client runs in.
#[derive(Debug, Clone, Copy)]
pub enum Client {
    /// The cgroup the hooks are attached to.
    Attached,
    /// `kubepods/pod<UID_A>` (team-a).
    PodA,
    /// `kubepods/pod<UID_UNMAPPED>`.
    Unmapped,
}

#[derive(Debug, Clone, Copy)]
pub enum Dest {
    /// The Backend's address, port [`CLOSED_PORT`].
    Closed,
    /// The Backend's address and port.
    Backend,
}

/// What every connect of a case must end with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Connected (through the proxy) and read to EOF.
    Ok,
    /// ECONNREFUSED from ext.
    Refused,
    /// EPERM from the hook.
    Denied,
}

impl Outcome {
    pub fn key(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::Denied => "denied",
        }
    }
}

pub struct Case {
    pub number: u8,
    pub setup: Setup,
    pub client: Client,
    pub dest: Dest,
    pub expect: Outcome,
    pub label: &'static str,
}

pub const CASES: [Case; 9] = [
    case(
        1,
        Setup::Directory,
        Client::Attached,
        Dest::Closed,
        Outcome::Refused,
        "not a Backend (its address, a closed port)",
    ),
    case(
        2,
        Setup::Directory,
        Client::Attached,
        Dest::Backend,
        Outcome::Ok,
        "Backend address (redirected)",
    ),
    case(
        3,
        Setup::KubeNamespace,
        Client::PodA,
        Dest::Closed,
        Outcome::Refused,
        "not a Backend (its address, a closed port)",
    ),
    case(
        4,
        Setup::KubeNamespace,
        Client::PodA,
        Dest::Backend,
        Outcome::Ok,
        "the pod's namespace Backend (redirected)",
    ),
    case(
        5,
        Setup::KubeNamespace,
        Client::Unmapped,
        Dest::Backend,
        Outcome::Denied,
        "Backend address from an unmapped pod (EPERM)",
    ),
    case(
        6,
        Setup::KubeCluster,
        Client::PodA,
        Dest::Backend,
        Outcome::Ok,
        "Backend address (redirected)",
    ),
    case(
        7,
        Setup::DirectoryDeny,
        Client::Attached,
        Dest::Backend,
        Outcome::Ok,
        "Backend address (redirected; compare case 2)",
    ),
    case(
        8,
        Setup::DirectoryDeny,
        Client::Attached,
        Dest::Closed,
        Outcome::Denied,
        "undeclared (refused by the policy, EPERM; compare case 1)",
    ),
    case(
        9,
        Setup::DirectoryDenyAllowed,
        Client::Attached,
        Dest::Closed,
        Outcome::Refused,
        "not a Backend, in --allow-cidr (compare case 1)",
    ),
];

const fn case(
    number: u8,
    setup: Setup,
    client: Client,
    dest: Dest,
    expect: Outcome,
    label: &'static str,
) -> Case {
    Case {
        number,
        setup,
        client,
        dest,
        expect,
        label,
    }
}

/// One measured round.
#[derive(Debug, Clone)]
pub struct Round {
    /// delta run_time_ns / delta run_cnt.
    pub ns_per_run: f64,
    /// delta run_cnt.
    pub runs: u64,
    /// The client's wall time per connect (whole connection), microseconds.
    pub wall_us: f64,
}

pub struct CaseResult {
    pub case: &'static Case,
    pub rounds: Result<Vec<Round>, String>,
}
