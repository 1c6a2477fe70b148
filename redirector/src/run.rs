//! `redirector run`: the node agent, wired together.
//!
//! Order matters: Backends are loaded, the proxy's address is bound, and only then is
//! the datapath attached (or adopted) and its Backend map synced, so no connect is ever
//! redirected to an address where nobody listens. The proxy listens before the Backends
//! are resolved when it is alone, after when it joins a running agent (an upgrade). The
//! "ready" line comes last.

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
};

use anyhow::Context;
use redirector_common::ProxyConfig;
use tokio_util::sync::CancellationToken;

use prometheus_client::registry::Registry;
use tokio::{sync::mpsc, task::JoinHandle};

mod capture;
mod egress;
mod host;
mod proxy_addrs;
mod signals;
mod uninstall;

pub use host::cgroup2_root;
pub use uninstall::uninstall;

use signals::Signals;

use crate::{
    admin::{self, Admin, Readiness},
    backend::Catalog,
    cli::{BackendScope, RunArgs},
    datapath::{self, Attachment, Datapath, MapSizes, PinLayout},
    kubernetes::{
        KubeSource,
        status::{self as kube_status, StatusWriter},
    },
    nameserver::{self, DnsMetrics},
    proxy::{self, ConnectionLimits, Shared, Stats},
    reconcile::{DnsSettings, ReconcileMetrics, Reconciler},
    resolver::Resolver,
    scopes::{ScopeSync, first_pods},
    status::StatusBoard,
    table::{BackendTable, Scoping},
    virtual_hosts::{VirtualHosts, VirtualRanges},
    watch,
    workload::{Pods, Workloads},
};

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    // Installed first: a SIGTERM that arrives right after the ready line must drain, not
    // kill the process with the default action.
    let mut signals = Signals::install()?;
    host::raise_open_file_limit();
    let scoping = match (args.kubernetes, args.backend_scope) {
        (true, BackendScope::Namespace) => Scoping::Namespace,
        _ => Scoping::Cluster,
    };
    let mut proxy_config = proxy_addrs::proxy_config(&args.proxy_addrs)?;
    if scoping == Scoping::Namespace {
        proxy_config.flags |= ProxyConfig::SCOPED;
    }
    let cgroup = match &args.cgroup {
        Some(path) => path.clone(),
        None => cgroup2_root().context("finding the cgroup2 mount (pass --cgroup)")?,
    };
    egress::exempt_self_early(&args);
    let resolver = Resolver::from_system()?;
    let shutdown = CancellationToken::new();
    let (pods_tx, mut pods_rx) = tokio::sync::watch::channel(Pods::new());
    let workloads = Arc::new(Workloads::new(cgroup.clone(), args.kubernetes));
    if args.kubernetes {
        tokio::spawn(workloads.clone().follow(pods_rx.clone(), shutdown.clone()));
    }
    let (egress_feeds, egress_view) = crate::egress::cluster::channels(pods_rx.clone());
    let (status_tx, status_rx) = tokio::sync::watch::channel(Vec::new());
    let (policy_status_tx, policy_status_rx) = tokio::sync::watch::channel(Vec::new());
    let readiness = Arc::new(Readiness::default());
    let stats = Arc::new(Stats::default());
    let kernel_tls = proxy::KernelTls::start(args.kernel_tls).context("--kernel-tls require")?;
    stats.kernel_tls_ciphers(kernel_tls.ciphers());
    let board = Arc::new(StatusBoard::default());
    let reconcile_metrics = Arc::new(ReconcileMetrics::default());
    let dns_metrics = Arc::new(DnsMetrics::default());
    let egress_metrics = Arc::new(crate::egress::EgressMetrics::default());
    let mut registry = Registry::default();
    egress_metrics.register(&mut registry);
    stats.register(&mut registry);
    reconcile_metrics.register(&mut registry);
    dns_metrics.register(&mut registry);
    let admin = Admin {
        registry,
        readiness: readiness.clone(),
        board: board.clone(),
        stats: stats.clone(),
    };
    // Serving before the first sync: /healthz answers while the API server is slow or
    // down at start (a liveness probe must not restart us for it); /readyz says 503.
    let admin_task = admin::serve(
        args.admin_addr,
        args.admin_socket.as_deref(),
        admin,
        shutdown.clone(),
    )
    .await?;

    // The first sync may wait for an API server that is down: a signal must still stop us.
    // Scoped, this node's pods are listed too before any listener is bound: an agent
    // joining a running one (an upgrade) takes no share of the shared listeners while
    // it may still wait.
    let started = async {
        let started = start_source(
            &args,
            pods_tx,
            egress_feeds,
            (status_rx, policy_status_rx),
            &shutdown,
        )
        .await?;
        let pods = match scoping {
            Scoping::Namespace => Some(first_pods(&mut pods_rx).await?),
            Scoping::Cluster => None,
        };
        anyhow::Ok((started, pods))
    };
    let ((catalog, catalogs_rx, status_writer), first_pods) = tokio::select! {
        started = started => started?,
        () = signals.wait() => {
            shutdown.cancel();
            let _ = admin_task.await;
            return Ok(());
        }
    };

    // Before the datapath is attached: a bad --access-log path must stop us while no
    // connect is redirected yet.
    let http = proxy::HttpProxy::new(proxy::HttpSettings {
        pool_idle_timeout: args.http.http_pool_idle_timeout,
        response_timeout: args.http.http_response_timeout,
    });
    let access_log = (args.http.access_log.as_deref())
        .map(proxy::AccessLog::open)
        .transpose()?;
    let bound = proxy::bind(&args.proxy_addrs)?;
    let capture = &args.dns.capture;
    let dns_addrs: Vec<SocketAddr> = (args.proxy_addrs.iter())
        .map(|addr| SocketAddr::new(addr.ip(), capture.dns_port))
        .collect();
    let dns_listeners = match capture.no_dns_capture {
        true => None,
        false => Some(nameserver::bind(&dns_addrs)?),
    };
    let dns_config = capture::dns_config(capture, &dns_addrs);
    let layout = PinLayout::new(&args.bpffs.bpffs);
    // Before the first id is made (the table, the pods' scopes, virtual addresses).
    let id_key = datapath::id_key(&layout).context("the node's id key")?;
    crate::ids::install(id_key);
    let sizes = MapSizes {
        backend_addresses: args.limits.max_backend_addresses,
        connections: args.limits.max_connections,
        scoped_cgroups: args.limits.max_scoped_cgroups,
    };
    let Datapath {
        backends,
        scopes,
        pending,
        agent_sockets,
        dns: dns_maps,
        egress: egress_maps,
        attachments,
    } = Datapath::install(&layout, &cgroup, sizes, &proxy_config, &dns_config)
        .with_context(|| format!("installing the datapath on cgroup {}", cgroup.display()))?;
    // Once the pins are ours: the value it changes is recorded beside them.
    host::enable_request_migration(&layout);
    // Alone (a first start, a restart), the proxy listens at once: connects that pins
    // kept redirecting queue in its backlog rather than being refused. Beside a running
    // agent (an upgrade), it listens once its Backends are resolved: until then the
    // running one serves every connect, and none waits in a backlog nobody accepts.
    let (mut listeners, deferred) = match backends.beside_another_agent() {
        false => (bound.listen()?, None),
        true => (Vec::new(), Some(bound)),
    };
    let names = egress::start(
        &args,
        egress_maps,
        &cgroup,
        egress_view,
        workloads.clone(),
        egress_metrics,
        &shutdown,
    )
    .await?;
    let adopted = attachments
        .iter()
        .filter(|(_, a)| *a == Attachment::Adopted)
        .count();
    if adopted > 0 && adopted < attachments.len() {
        // Some links were pinned by an older agent that had fewer programs: those keep
        // running the old code (no DNS capture on connect(), no virtual address
        // passthrough) until the pins are replaced.
        let fresh: Vec<&str> = (attachments.iter())
            .filter(|(_, a)| *a == Attachment::Attached)
            .map(|(name, _)| *name)
            .collect();
        tracing::warn!(
            attached_now = ?fresh,
            "programs pinned by an older agent were adopted beside new ones; run \
             `redirector uninstall --bpffs {}` and start the agent again to run this \
             version's programs",
            layout.root().display()
        );
    }

    let shared = Arc::new(Shared {
        pending,
        agent_sockets: Arc::new(agent_sockets),
        table: RwLock::new(Arc::new(BackendTable::default())),
        limits: ConnectionLimits {
            connect_timeout: args.limits.connect_timeout,
            idle_timeout: args.limits.idle_timeout,
            buffer_size: args.limits.buffer_size,
        },
        stats,
        log_limit: Default::default(),
        http,
        access_log,
        workloads: workloads.clone(),
        shutdown: shutdown.clone(),
        tasks: tokio_util::task::TaskTracker::new(),
        pipes: proxy::Pipes::new(proxy::MAX_PIPES),
        kernel_tls: Arc::new(kernel_tls),
    });
    let dns = DnsSettings {
        min_ttl: args.dns.dns_min_ttl,
        max_ttl: args.dns.dns_max_ttl,
        grace: args.dns.dns_grace,
    };
    // From now on the resolver's sockets are exempt from DNS capture.
    let _ = resolver.exemptions().set(shared.agent_sockets.clone());
    let mut reconciler = Reconciler::new(
        backends,
        shared.clone(),
        resolver,
        dns,
        reconcile_metrics,
        board,
        scoping,
    );
    if status_writer.is_some() {
        reconciler = reconciler.with_object_statuses(status_tx, policy_status_tx);
    }
    if dns_listeners.is_some() {
        let ranges = VirtualRanges {
            v4: capture.virtual_ipv4_range,
            v6: capture.virtual_ipv6_range,
        };
        // A deleted Backend's virtual addresses work as long as a pod may hold them.
        let hold = capture.dns_answer_ttl + args.dns.dns_grace;
        let virtuals = VirtualHosts::new(ranges, Some(dns_maps.virtual_hosts), hold);
        reconciler = reconciler.with_virtual_hosts(virtuals);
    }
    if let Some(pods) = first_pods {
        // Ready only once this node's pods are mapped: until then their namespace's
        // Backends would not apply to them.
        let root = args
            .pod_cgroup_root
            .clone()
            .unwrap_or_else(|| cgroup.clone());
        let mut sync = ScopeSync::new(scopes, root);
        sync.sync(&pods);
        tokio::spawn(sync.run(pods_rx, shutdown.clone()));
    }
    // Before accepting: redirected connects (adopted pins may already send some) queue in
    // the listen backlog until their Backends are known.
    let synced = reconciler
        .apply_catalog(catalog)
        .await
        .context("writing Backend addresses to the datapath")?;
    let reconciling = tokio::spawn(reconciler.run(catalogs_rx, shutdown.clone()));
    if let Some(bound) = deferred {
        listeners = bound.listen()?;
    }

    let capturing = match dns_listeners {
        Some(listeners) => {
            let dns_stop = CancellationToken::new();
            let forwarder = nameserver::Forwarder::start(
                &shared.agent_sockets,
                dns_metrics.clone(),
                names.clone(),
                &dns_stop,
            )
            .context("binding the DNS forwarder's sockets")?;
            let context = Arc::new(nameserver::Context {
                shared: shared.clone(),
                pending: dns_maps.pending,
                metrics: dns_metrics,
                forwarder,
                answering: nameserver::Answering {
                    ttl: u32::try_from(capture.dns_answer_ttl.as_secs()).unwrap_or(u32::MAX),
                    v4: args.proxy_addrs.iter().any(SocketAddr::is_ipv4),
                    v6: args.proxy_addrs.iter().any(SocketAddr::is_ipv6),
                },
                names,
            });
            tokio::spawn(nameserver::serve(listeners, context, dns_stop.clone()));
            // Capture starts with the first beat: the listener is up and the names known.
            Some(tokio::spawn(capture::heartbeat(
                dns_maps.heartbeat,
                shutdown.clone(),
                dns_stop,
            )))
        }
        None => None,
    };
    let backend_count = shared.table().entries().count();
    let server = tokio::spawn(proxy::serve(
        listeners,
        shared.clone(),
        args.limits.drain_timeout,
    ));
    tracing::info!(
        backends = backend_count,
        addresses = synced.total,
        cgroup = %cgroup.display(),
        proxy = ?args.proxy_addrs,
        bpffs = %layout.root().display(),
        programs_adopted = adopted,
        dns_capture = capturing.is_some(),
        "ready: programs attached, Backends loaded, proxy listening"
    );
    readiness.set_ready();

    signals.wait().await;
    tracing::info!("shutting down: no new connections; programs stay attached and pinned");
    shutdown.cancel();
    if let Some(beating) = capturing {
        // Capture ends first: pods resolve through their own nameservers from now on.
        let _ = beating.await;
    }
    let cut = server.await.context("proxy task")?;
    let _ = admin_task.await;
    let _ = reconciling.await;
    if let Some(writer) = status_writer {
        // Releases the status Lease, so another agent takes over at once.
        let _ = writer.await;
    }
    let (forwarded, refused) = shared.stats.totals();
    tracing::info!(forwarded, refused, cut_by_drain_timeout = cut, "stopped");
    Ok(())
}

/// Starts the Backend source: the first catalog, and a stream of the next ones.
async fn start_source(
    args: &RunArgs,
    pods: tokio::sync::watch::Sender<Pods>,
    egress: crate::egress::cluster::ClusterFeeds,
    (statuses, policy_statuses): kube_status::Updates,
    shutdown: &CancellationToken,
) -> anyhow::Result<(Catalog, mpsc::Receiver<Catalog>, Option<JoinHandle<()>>)> {
    let (catalogs_tx, mut catalogs_rx) = mpsc::channel(1);
    if args.kubernetes {
        let node = args
            .node_name
            .clone()
            .context("--kubernetes needs --node-name")?;
        let source = KubeSource::connect(args.kubeconfig.as_deref())
            .await
            .context("connecting to the Kubernetes API")?;
        // One candidate per agent, not per node: during an upgrade two agents run on it.
        let identity = format!("{node}/{:08x}", rand::random::<u32>());
        let writer = StatusWriter::spawn(
            source.client(),
            identity,
            args.lease_namespace.clone(),
            statuses,
            policy_statuses,
            shutdown.clone(),
        );
        source.spawn_egress(egress, shutdown.clone());
        source.spawn(node, catalogs_tx, pods, shutdown.clone());
        tracing::info!("waiting for the initial sync with the Kubernetes API");
        let first = catalogs_rx
            .recv()
            .await
            .context("the Kubernetes source stopped before its initial sync")?;
        return Ok((first, catalogs_rx, Some(writer)));
    }
    let first = watch::spawn(args.backends.clone(), catalogs_tx, shutdown.clone())?;
    Ok((first, catalogs_rx, None))
}
