"""Settings: flags and TPU_WEBHOOK_* environment variables. The only module that reads the env."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

OfferedSource = Literal["nodes", "computeClasses", "resourceFlavors", "xpk"]
_LABEL_VALUE = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"


class DeclaredShape(BaseModel):
    """One entry of the administrator's list of offered TPU shapes (the chart's
    `offeredShapes.declared`): an accelerator label, its topologies (none: any), the namespaces
    it is offered to (none: every one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accelerator: str = Field(pattern=_LABEL_VALUE)
    topologies: tuple[str, ...] = Field(default=(), max_length=256)
    namespaces: frozenset[str] = Field(default=frozenset(), max_length=1024)


class StartupError(Exception):
    """A setting the server cannot act on where it runs (said in one line, exit status 2)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TPU_WEBHOOK_", frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8443, ge=0, le=65535)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    client_ca_file: Path | None = None
    # Where `serve` without certificate files makes (or reuses) development certificates.
    dev_certs_dir: Path = Path("certs")
    catalog: Path | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    max_body_bytes: int = Field(default=3 * 1024 * 1024, ge=1024)
    # Copy cpu and memory limits from requests (and back) on TPU containers, like google.com/tpu.
    # Off by default: a copied limit changes the Pod's QoS class and throttles its CPU.
    copy_cpu_memory_limits: bool = False
    # Write TPU_WORKER_ID / TPU_WORKER_HOSTNAMES where missing; False only checks what is set
    # (for clusters where GKE's own injection into Indexed Jobs is preferred).
    inject_worker_env: bool = True
    # Write MEGASCALE_NUM_SLICES / _SLICE_ID / _COORDINATOR_ADDRESS into a JobSet's TPU
    # replicatedJobs of several slices where missing (opt-in: GKE may write them itself).
    inject_megascale: bool = False
    # The opt-outs a user may write on an object (chart `webhook.exemptions`): the label
    # tpu-webhook.io/ignore: "true" (neither checked nor patched), GKE's annotation
    # cloud.google.com/skip-tpu-webhook-check: "true" (not checked); and the namespaces whose
    # objects may use them (empty: every namespace the webhook is sent).
    honour_opt_out_label: bool = True
    honour_skip_annotation: bool = True
    exemption_namespaces: frozenset[str] = frozenset()
    cert_reload_seconds: float = Field(default=2.0, gt=0)
    # Readiness fails once changed certificate files could not be loaded for this long.
    cert_reload_failing_seconds: float = Field(default=60.0, ge=0)
    # Longer than the API server's 90 s idle connection timeout: no new handshake after a lull.
    keep_alive_seconds: int = Field(default=120, ge=1)
    graceful_shutdown_seconds: int = Field(default=20, ge=1)
    # A request must arrive completely within this time (slow clients are dropped).
    request_timeout_seconds: float = Field(default=10.0, gt=0)
    # On SIGTERM idle keep-alive connections stay open this long to answer a request in flight.
    shutdown_drain_seconds: float = Field(default=2.0, ge=0)
    # A request's line and headers larger than this are answered 431 (the API server sends < 1 KiB).
    max_head_bytes: int = Field(default=32 * 1024, ge=1024)
    # Open connections at most (about 38 KiB each over TLS): above it the one idle longest closes.
    max_connections: int = Field(default=1000, ge=16)
    print_webhook_configs: bool = True
    # selfManaged certificates (the chart's certificates.mode=selfManaged): the server keeps its
    # CA and serving certificate in this Secret and the caBundle of the named configurations
    # current through the Kubernetes API (webhook/certificates/selfmanaged.py). Empty: files.
    cert_secret: str = ""
    cert_secret_namespace: str = ""
    # A Secret (same namespace) that gets only ca.crt, the CAs of the caBundle, for whoever must
    # trust the server without reading its keys (a metrics collector). Empty: none.
    cert_ca_secret: str = ""
    cert_service: str = ""  # the Service the API server calls: the certificate's DNS names
    cert_mutating_configuration: str = ""
    cert_validating_configuration: str = ""
    cert_ca_validity_days: float = Field(default=365, gt=0)
    cert_validity_days: float = Field(default=90, gt=0)
    cert_sync_seconds: float = Field(default=10, gt=0)
    # A new CA is in both caBundles this long before a certificate from it is served.
    cert_propagation_seconds: float = Field(default=60, ge=0)
    # Older CAs stay in the caBundles this long after the new certificate is issued.
    cert_overlap_seconds: float = Field(default=600, ge=0)
    # Read the cluster objects decisions need (GKE ComputeClasses, DRA DeviceClasses and
    # ResourceClaimTemplates, Kubeflow Trainer runtimes) through the Kubernetes API, read-only,
    # every cluster_sync_seconds (the chart's clusterObjects); off: only what a review carries.
    cluster_objects: bool = False
    cluster_sync_seconds: float = Field(default=30.0, gt=0)
    # Record a Kubernetes Event on the object a person wrote (the top of the controlling
    # ownerReferences) when an object a controller made is warned or denied, so that `kubectl
    # describe` on it shows why (the chart's ownerEvents; serving/ownerevents.py).
    owner_events: bool = False
    # The GKE mode whose admission rules are applied too: Autopilot refuses host namespaces,
    # host ports and some node selectors (webhook/policy/autopilot.py). "detect": Autopilot when
    # the cluster serves its API (read with cluster_objects).
    profile: Literal["standard", "autopilot", "detect"] = "standard"
    # The TPU shapes the cluster offers (webhook/policy/offered.py): the sources the cluster
    # watcher reads for them (with cluster_objects), xpk's resources ConfigMap as
    # "namespace/name" (empty: not read), the administrator's list (JSON in the environment), and
    # whether a shape that list does not offer is refused (otherwise only warned about).
    offered_sources: frozenset[OfferedSource] = frozenset(
        {"nodes", "computeClasses", "resourceFlavors", "xpk"}
    )
    xpk_configmap: str = Field(default="", pattern=r"^$|^[a-z0-9-]{1,63}/[a-z0-9.-]{1,253}$")
    offered_shapes: tuple[DeclaredShape, ...] = Field(default=(), max_length=256)
    enforce_offered_shapes: bool = False
    # Audit the TPU workloads stored in the cluster every this many seconds, off the request
    # path, and write the PolicyReports `tpu-webhook audit --policy-reports` writes (the
    # chart's `audit`); 0: never.
    audit_interval_seconds: float = Field(default=0, ge=0)
    # The identity that calls the Kubernetes API out of a cluster; in a Pod, its ServiceAccount.
    kubeconfig: Path | None = None

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        return self

    @model_validator(mode="after")
    def _self_managed_complete(self) -> Settings:
        if not self.cert_secret:
            return self
        if self.tls_cert_file is not None:
            raise ValueError("cert_secret (selfManaged certificates) excludes tls_cert_file")
        if not (self.cert_secret_namespace and self.cert_service):
            raise ValueError("cert_secret needs cert_secret_namespace and cert_service")
        return self
