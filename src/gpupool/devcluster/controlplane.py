"""Start and stop one local control plane: etcd, kube-apiserver, optionally kwok and scheduler.

The API server runs with the flags envtest uses (RBAC, no ServiceAccount admission because no
controller-manager creates default service accounts) plus the ones kwokctl uses for speed
(no priority-and-fairness, no in-flight limits), on free loopback ports, with certificates made
for this cluster only. etcd runs with ``--unsafe-no-fsync``: the data is thrown away anyway, and
fsync on a shared CI disk would dominate every test.

The admin kubeconfig (client certificate in ``system:masters``) is written next to the logs;
it is what the tests, the scheduler under test, kwok and kube-scheduler all use.
"""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.devcluster.binaries import find_binaries, require
from gpupool.devcluster.certs import ClusterCerts, write_client_cert, write_cluster_certs
from gpupool.devcluster.processes import ManagedProcess, StartsAndStops, free_port

START_TIMEOUT = 60.0
STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")

WORKLOAD_GATES = (
    "--feature-gates=GenericWorkload=true,WorkloadWithJob=true,TopologyAwareWorkloadScheduling=true"
)
"""Kubernetes 1.37's Workload and PodGroup API (beta, off by default), the Job controller
making a PodGroup for each Job (alpha) and a PodGroup's topology constraint (alpha, without it
the API server refuses ``spec.schedulingConstraints``): on in every component that reads them,
so gangs can be declared, Jobs become gangs, and kube-scheduler schedules them as the
reference."""


@dataclass(frozen=True, slots=True)
class SchedulerClient:
    """Client settings for kube-scheduler: its default QPS of 50 would measure throttling."""

    qps: int = 5000
    burst: int = 5000


@dataclass
class LocalControlPlane(StartsAndStops):
    """A control plane on loopback, in ``folder`` (a fresh temporary folder by default).

    Use as a context manager, or call :meth:`start` and :meth:`stop`.

    ``controllers``: also run kube-controller-manager (Deployments, DaemonSets, ServiceAccounts
    and their root CA, EndpointSlices, garbage collection), with ServiceAccount admission on and
    webhooks reached at their endpoints (no kube-proxy): what installing the Helm chart on a
    real node needs. Off by default, since kwok-only tests need none of it and start faster.
    """

    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpupool-cp-")))
    bin_dir: Path = field(default_factory=find_binaries)
    keep_folder: bool = False
    controllers: bool = False
    api_port: int = 0
    certs: ClusterCerts | None = None
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""
        return self.folder / "admin.kubeconfig"

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.api_port}"

    def start(self) -> None:
        """Start etcd and kube-apiserver and wait until the API server is ready."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.certs = write_cluster_certs(self.folder / "pki")
        self._start_etcd()
        self.api_port = free_port()
        self.start_apiserver()
        self._write_kubeconfig()
        if self.controllers:
            self.start_controller_manager()

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = ManagedProcess(
            "etcd",
            [
                str(require(self.bin_dir, "etcd")),
                f"--data-dir={self.folder / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            self.folder / "etcd.log",
        )
        self.processes["etcd"] = etcd
        etcd.wait_ready(lambda: http_ok(f"127.0.0.1:{client}", "/health", None), START_TIMEOUT)

    def start_apiserver(self) -> None:
        """Start (or restart, on the same port and etcd) kube-apiserver and wait for /readyz."""
        certs = self._certs()
        api = ManagedProcess(
            "kube-apiserver",
            [
                str(require(self.bin_dir, "kube-apiserver")),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                f"--client-ca-file={certs.ca_cert}",
                f"--service-account-issuer=https://127.0.0.1:{self.api_port}",
                f"--service-account-key-file={certs.sa_public}",
                f"--service-account-signing-key-file={certs.sa_private}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=RBAC",
                WORKLOAD_GATES,  # the PodGroup API gangs are declared with
                "--runtime-config=scheduling.k8s.io/v1beta1=true",
                *self._controller_flags(),
                "--allow-privileged=true",
                # a real node's Hostname address (its name) resolves nowhere: logs and exec
                # reach its kubelet by the InternalIP the kubelet reports
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                f"--cert-dir={self.folder / 'pki'}",
            ],
            self.folder / "kube-apiserver.log",
        )
        self.processes["kube-apiserver"] = api
        api.wait_ready(
            lambda: http_ok(f"127.0.0.1:{self.api_port}", "/readyz", self._ssl_context()),
            START_TIMEOUT,
        )

    def _controller_flags(self) -> list[str]:
        if not self.controllers:  # no controller creates the ServiceAccounts admission wants
            return ["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"]
        return [
            "--disable-admission-plugins=TaintNodesByCondition",
            "--enable-aggregator-routing=true",  # webhooks at their endpoints: no kube-proxy
        ]

    def _start_component(
        self, name: str, args: list[str], health: int, context: ssl.SSLContext | None
    ) -> None:
        """Start ``name`` (a binary of the build) with ``args``; wait for its /healthz."""
        process = ManagedProcess(
            name, [str(require(self.bin_dir, name)), *args], self.folder / f"{name}.log"
        )
        self.processes[name] = process
        process.wait_ready(
            lambda: http_ok(f"127.0.0.1:{health}", "/healthz", context), START_TIMEOUT
        )

    def start_controller_manager(self) -> None:
        """Start kube-controller-manager (no leader election) and wait for its /healthz."""
        certs = self._certs()
        health = free_port()
        self._start_component(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={health}",
                f"--root-ca-file={certs.ca_cert}",
                f"--service-account-private-key-file={certs.sa_private}",
                "--use-service-account-credentials=false",
                f"--cluster-signing-cert-file={certs.ca_cert}",
                f"--cluster-signing-key-file={certs.ca_cert.with_name('ca.key')}",
                WORKLOAD_GATES,  # the Job controller makes each Job's PodGroup
                "--v=1",
            ],
            health,
            _insecure(),
        )

    def stop_apiserver(self) -> None:
        """Stop the API server only (cuts every watch; etcd keeps the data)."""
        self.processes.pop("kube-apiserver").stop()

    def start_kwok(self, stages: Path = STAGES_FILE) -> None:
        """Start kwok for nodes annotated ``kwok.x-k8s.io/node=fake`` with gpupool's stages."""
        port = free_port()
        self._start_component(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={stages}",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.0.0.0/16",
                "--node-ip=10.0.0.1",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{port}",
            ],
            port,
            None,
        )

    def start_kube_scheduler(self, client: SchedulerClient = SchedulerClient()) -> None:
        """Start the real kube-scheduler (default profile, no leader election)."""
        config = self.folder / "kube-scheduler.json"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(self.kubeconfig),
                        "qps": client.qps,
                        "burst": client.burst,
                    },
                    "leaderElection": {"leaderElect": False},
                    "profiles": [{"schedulerName": "default-scheduler"}],
                }
            )
        )
        health = free_port()
        self._start_component(
            "kube-scheduler",
            [
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={health}",
                WORKLOAD_GATES,  # its own gang scheduling, the reference gpupool is checked with
                "--v=1",
            ],
            health,
            _insecure(),
        )

    def stop_process(self, name: str) -> None:
        """Stop one optional process (kwok, kube-scheduler) if it runs."""
        process = self.processes.pop(name, None)
        if process is not None:
            process.stop()

    def stop(self) -> None:
        """Stop everything, newest first; remove the folder unless ``keep_folder``."""
        for name in reversed(list(self.processes)):
            self.processes.pop(name).stop()
        if not self.keep_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _certs(self) -> ClusterCerts:
        if self.certs is None:
            raise RuntimeError("the control plane has not been started")
        return self.certs

    def _ssl_context(self) -> ssl.SSLContext:
        certs = self._certs()
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        context.load_cert_chain(str(certs.admin_cert), str(certs.admin_key))
        return context

    def _write_kubeconfig(self) -> None:
        certs = self._certs()
        self._kubeconfig_for(self.kubeconfig, certs.admin_cert, certs.admin_key)

    def user_kubeconfig(self, user: str, group: str | None = None) -> Path:
        """A kubeconfig for ``user`` (optionally in ``group``): only what RBAC grants it."""
        cert, key = write_client_cert(self.folder / "pki", user, group)
        path = self.folder / f"{user}.kubeconfig"
        self._kubeconfig_for(path, cert, key)
        return path

    def _kubeconfig_for(self, path: Path, cert: Path, key: Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpupool-dev",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self._certs().ca_cert),
                    },
                }
            ],
            "users": [
                {"name": "user", "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [
                {"name": "gpupool-dev", "context": {"cluster": "gpupool-dev", "user": "user"}}
            ],
            "current-context": "gpupool-dev",
        }
        path.write_text(json.dumps(config, indent=2))


def _insecure() -> ssl.SSLContext:
    """For a component's own self-signed /healthz on loopback."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def http_ok(host: str, path: str, context: ssl.SSLContext | None) -> bool:
    """Whether GET ``path`` answers 200 (any connection error counts as not yet)."""
    connection: http.client.HTTPConnection = (
        http.client.HTTPSConnection(host, timeout=2, context=context)
        if context is not None
        else http.client.HTTPConnection(host, timeout=2)
    )
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()
