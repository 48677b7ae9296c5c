"""The few Kubernetes API calls of the server, with the `kubernetes` client: the selfManaged
certificate mode's reads and patches, the read-only lists of the cluster watcher, and the owner
reads and Events of the owner-event recorder (serving/ownerevents.py).

The client's configuration, authentication (the ServiceAccount token, re-read as the kubelet
rotates it), TLS and transport, on the API paths of the three objects: its generated API classes
are not imported (`CoreV1Api` alone takes 1.7 s to import: hundreds of models), and reads return
the object as JSON, so fields a newer API server adds survive. Writes are patches that carry the
resourceVersion read: the API server refuses them (409) when the object changed since, which is
how several replicas take turns.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from webhook.registration import MUTATING, VALIDATING, Configuration
from webhook.settings import StartupError

FIELD_MANAGER = "tpu-webhook"
TIMEOUT = (5.0, 10.0)  # seconds to connect, to read
SECRET = "/api/v1/namespaces/{namespace}/secrets/{name}"
# Objects as their metadata alone (the API server's PartialObjectMetadataList), JSON otherwise.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
EVENTS = "/api/v1/namespaces/{namespace}/events"
EVENT = "/api/v1/namespaces/{namespace}/events/{name}"
CONFIGURATIONS: dict[Configuration, str] = {
    MUTATING: "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}",
    VALIDATING: "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}",
}


class ApiError(Exception):
    """A Kubernetes API call failed; the message is the API server's."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Conflict(ApiError):
    """The object changed since it was read (409): someone else wrote first."""


class KubeApi:
    """Read and patch the Secret and the two webhook configurations; list objects; write the
    audit's PolicyReports."""

    def __init__(self, api_client: k8s.ApiClient, namespace: str = "default") -> None:
        self.client = api_client
        self.namespace = namespace  # the kubeconfig context's namespace, as kubectl defaults it

    @classmethod
    def connect(cls, kubeconfig: Path | None) -> KubeApi:
        """In-cluster (the Pod's ServiceAccount token), or the given kubeconfig."""
        if kubeconfig is not None:
            client = k8s_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
            return cls(client)
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException as error:
            raise StartupError(
                f"no credentials for the API server ({error}): in a Pod they are its "
                "ServiceAccount's; elsewhere set TPU_WEBHOOK_KUBECONFIG, or turn off what reads "
                "the cluster (TPU_WEBHOOK_CLUSTER_OBJECTS, TPU_WEBHOOK_OWNER_EVENTS, "
                "TPU_WEBHOOK_CERT_SECRET)"
            ) from error
        return cls(k8s.ApiClient(configuration))

    def read_secret(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call("GET", SECRET, namespace=namespace, name=name)

    def patch_secret(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        merge = "application/merge-patch+json"
        self._call("PATCH", SECRET, patch, merge, namespace=namespace, name=name)

    def read_configuration(self, kind: Configuration, name: str) -> dict[str, Any] | None:
        """The configuration, or None when there is none of that name."""
        try:
            return self._call("GET", CONFIGURATIONS[kind], name=name)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def patch_configuration(self, kind: Configuration, name: str, patch: Mapping[str, Any]) -> None:
        strategic = "application/strategic-merge-patch+json"  # webhooks merge by name
        self._call("PATCH", CONFIGURATIONS[kind], patch, strategic, name=name)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path | None, context: str | None = None) -> KubeApi:
        """As kubectl connects (the CLI): the kubeconfig given, else $KUBECONFIG (a list of
        files too) or ~/.kube/config, read by the client; its current context or `context`."""
        path = None if kubeconfig is None else str(kubeconfig)
        try:
            contexts, current = k8s_config.list_kube_config_contexts(path)  # type: ignore[no-untyped-call]
            chosen = (
                next((c for c in contexts if c["name"] == context), None) if context else current
            )
            if chosen is None:
                raise StartupError(f'context "{context}" does not exist')
            client = k8s_config.new_client_from_config(path, context=context)  # type: ignore[no-untyped-call]
        except (k8s_config.ConfigException, OSError) as error:
            raise StartupError(f"cannot read the kubeconfig: {error}") from error
        return cls(client, str(chosen.get("context", {}).get("namespace") or "default"))

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, body, "application/json")

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT: refused (409, Conflict) when the body's resourceVersion is not the stored one."""
        return self._call("PUT", path, body, "application/json")

    def delete(self, path: str) -> None:
        self._call("DELETE", path)

    def get(self, path: str) -> dict[str, Any]:
        """GET a path (discovery: `/apis/auto.gke.io`; an object: `/apis/batch/v1/namespaces/
        ns/jobs/name`)."""
        return self._call("GET", path)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._call("POST", EVENTS, event, "application/json", namespace=namespace)

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        merge = "application/merge-patch+json"
        self._call("PATCH", EVENT, patch, merge, namespace=namespace, name=name)

    def list_all(self, path: str, **options: Any) -> list[dict[str, Any]]:
        """Every object of a list path (`/apis/cloud.google.com/v1/computeclasses`), each with
        its apiVersion and kind (a list's items carry neither); `options` as `pages` takes them."""
        return [item for items in self.pages(path, **options) for item in items]

    def pages(
        self,
        path: str,
        page: int = 500,
        label_selector: str = "",
        metadata_only: bool = False,
        cached: bool = False,
        field_selector: str = "",
    ) -> Iterator[list[dict[str, Any]]]:
        """The objects of a list path, one page at a time (at most `page` in memory: the audit
        decides each page as it comes); with `metadata_only`, only their metadata
        (PartialObjectMetadata: a Node without its status); `cached`: from the API server's
        watch cache (resourceVersion=0, as informers list: no etcd read, at most slightly
        stale; one page)."""
        token = ""
        selector = [("labelSelector", label_selector)] if label_selector else []
        selector += [("fieldSelector", field_selector)] if field_selector else []
        # from the watch cache: the whole list at once (a continue token excludes a version)
        paging = [("resourceVersion", "0")] if cached else [("limit", str(page))]
        accept = METADATA_ONLY if metadata_only else "application/json"
        while True:
            query = [*paging, *selector] + ([("continue", token)] if token else [])
            answer = self._call("GET", path, query=query, accept=accept)
            kind = str(answer.get("kind", "")).removesuffix("List")
            items = []
            for item in answer.get("items") or ():
                if isinstance(item, dict):
                    item.setdefault("apiVersion", answer.get("apiVersion", ""))
                    item.setdefault("kind", kind)
                    items.append(item)
            yield items
            metadata = answer.get("metadata")
            token = metadata.get("continue", "") if isinstance(metadata, dict) else ""
            if not token:
                return

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        content_type: str = "",
        query: list[tuple[str, str]] | None = None,
        accept: str = "application/json",
        **names: str,
    ) -> dict[str, Any]:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        request = self.client.param_serialize(
            method=method,
            resource_path=path,
            path_params=names,
            query_params=[("fieldManager", FIELD_MANAGER)] if body is not None else query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.client.call_api(*request, _request_timeout=TIMEOUT)
        except ApiException as error:
            raise _api_error(int(error.status or 0), error.body, error.reason) from None
        data = response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise _api_error(response.status, data, response.reason)
        return dict(orjson.loads(data))


def _api_error(status: int, body: bytes | str | None, reason: str | None) -> ApiError:
    """The API server's message (its Status object's), as ApiError or Conflict."""
    try:
        message = str(orjson.loads(body or b"{}").get("message") or reason)
    except (orjson.JSONDecodeError, AttributeError):
        message = str(reason)
    return (Conflict if status == 409 else ApiError)(f"{status}: {message}", status)
