"""Resource labels ('local.localhost', 'purdue.anvil', ...) -> pilotfish pilot settings.

RP keeps per-site JSON configs; pilotfish needs only what its PilotDescription takes: the
batch system (`resource`), cores/GPUs per node, and optionally a launcher. The table ships the
local labels; users add their sites with `rp.add_resource(label, {...})` or a JSON file named
by $PILOTFISH_RP_RESOURCES ({label: config}). A config: resource ('local', 'slurm', 'pbs',
'lsf', 'flux'), cores_per_node, gpus_per_node, launcher, launcher_options, partitions,
fake_resources (True: one node of whatever was asked for, as RP's localhost).
"""

from __future__ import annotations

import os

from .. import _json

_KEYS = (
    "resource",
    "cores_per_node",
    "gpus_per_node",
    "launcher",
    "launcher_options",
    "partitions",
    "fake_resources",
)

RESOURCES: dict[str, dict] = {
    "local.localhost": {"resource": "local", "fake_resources": True},
    "local.localhost_test": {"resource": "local", "fake_resources": True},
    "local.localhost_flux": {"resource": "local", "fake_resources": True},
    # a batch allocation on this machine's own Slurm (the project's substrate, or any site
    # whose nodes the client's Slurm reaches); cores per node are learned from the job
    "local.slurm": {"resource": "slurm"},
}


def add_resource(label: str, config: dict) -> None:
    """Register (or replace) a resource label. ValueError for unknown keys or a missing
    'resource'."""
    if not isinstance(label, str) or "." not in label:
        raise ValueError(f"resource label {label!r} must look like 'site.machine'")
    unknown = sorted(set(config) - set(_KEYS))
    if unknown:
        raise ValueError(f"resource {label!r}: unknown keys {unknown} (known: {', '.join(_KEYS)})")
    if "resource" not in config:
        raise ValueError(f"resource {label!r}: 'resource' (the batch system) is required")
    RESOURCES[label] = dict(config)


def resource_config(label: str) -> dict:
    """The config of a label; KeyError(message) for an unknown one."""
    if label in RESOURCES:
        return RESOURCES[label]
    extra = os.environ.get("PILOTFISH_RP_RESOURCES")
    if extra:
        try:
            with open(extra) as f:
                table = _json.load(f)
        except ValueError as e:
            raise ValueError(f"$PILOTFISH_RP_RESOURCES {extra}: not a JSON file: {e}") from None
        for k, v in table.items():
            add_resource(k, v)
        if label in RESOURCES:
            return RESOURCES[label]
    raise KeyError(
        f"unknown resource label (known: {', '.join(sorted(RESOURCES))}; add a "
        f"site with rp.add_resource(label, config) or $PILOTFISH_RP_RESOURCES)"
    )


# -- RP's own resource configs (rp.utils.get_resource_config, a user's site files) ---------


def _schemes() -> dict[str, str]:
    """The batch system of a job_manager_endpoint's scheme (fork: this machine, a local
    pilot; the others: each batch system's record's rp_schemes, batch/registry.py)."""
    from ..batch import systems

    out = {"fork": "local"}
    for s in systems():
        out.update((scheme, s.name) for scheme in s.rp_schemes)
    return out


class ResourceConfig(dict):
    """RP's resource config: a dict with attribute access (default_schema, schemas,
    job_manager_endpoint, filesystem_endpoint, cores_per_node, ...)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"ResourceConfig has no {name!r}") from None


def user_config_dir() -> str:
    """RP's user configs: $RADICAL_CONFIG_USER_DIR (default: $HOME)/.radical/pilot/configs."""
    base = os.environ.get("RADICAL_CONFIG_USER_DIR") or os.path.expanduser("~")
    return os.path.join(base, ".radical", "pilot", "configs")


def _user_site(site: str) -> dict:
    path = os.path.join(user_config_dir(), f"resource_{site}.json")
    try:
        with open(path) as f:
            return _json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise ValueError(f"{path}: not a JSON file: {e}") from None


def list_resources() -> list[str]:
    """The labels known here: pilotfish's table and the user's RP site files."""
    out = set(RESOURCES)
    try:
        names = os.listdir(user_config_dir())
    except OSError:
        names = []
    for n in names:
        if n.startswith("resource_") and n.endswith(".json"):
            site = n[len("resource_") : -len(".json")]
            out.update(f"{site}.{m}" for m in _user_site(site))
    return sorted(out)


def get_resource_config(resource: str, schema: str | None = None) -> ResourceConfig:
    """RP's config of a label -- from the user's `resource_<site>.json` (RP's form: {machine:
    config}), else built from pilotfish's table --; with `schema`, that access schema's
    job_manager_endpoint / filesystem_endpoint at the top, as RP's session gives it."""
    site, _, machine = resource.partition(".")
    cfg = _user_site(site).get(machine)
    if cfg is None:
        try:
            pf = resource_config(resource)
        except KeyError:
            raise KeyError(
                f"no resource config for {resource!r} (RP's user configs: "
                f"{user_config_dir()}/resource_{site}.json; pilotfish's labels: "
                f"{', '.join(sorted(RESOURCES))}, rp.add_resource)"
            ) from None
        scheme = "fork" if pf["resource"] == "local" else pf["resource"]
        cfg = {
            "default_schema": "local",
            "schemas": {
                "local": {
                    "job_manager_endpoint": f"{scheme}://localhost/",
                    "filesystem_endpoint": "file://localhost/",
                }
            },
            "resource_manager": "FORK" if scheme == "fork" else scheme.upper(),
            **{k: v for k, v in pf.items() if k in ("cores_per_node", "gpus_per_node")},
        }
    out = ResourceConfig(cfg)
    out["label"] = resource
    if schema is not None:
        schemas = out.get("schemas") or {}
        if schema not in schemas:
            raise ValueError(
                f"resource {resource!r}: no access schema {schema!r} (its "
                f"schemas: {', '.join(schemas) or 'none'})"
            )
        out.update(schemas[schema])
    return out


def _endpoint(resource: str, schema: str | None, key: str) -> str:
    cfg = get_resource_config(resource)
    schema = schema or cfg.get("default_schema")
    schemas = cfg.get("schemas") or {}
    if schema not in schemas:
        raise ValueError(
            f"resource {resource!r}: no access schema {schema!r} (its schemas: "
            f"{', '.join(schemas) or 'none'})"
        )
    return schemas[schema][key]


def get_resource_job_url(resource: str, schema: str | None = None) -> str:
    return _endpoint(resource, schema, "job_manager_endpoint")


def get_resource_fs_url(resource: str, schema: str | None = None) -> str:
    return _endpoint(resource, schema, "filesystem_endpoint")


def from_user_config(label: str, schema: str | None) -> dict | None:
    """A pilotfish config (see _KEYS) for a label of the user's RP site files, with the access
    schema given (else its default): the batch system from the job_manager_endpoint's scheme
    (fork://localhost: a local pilot). None: no such user config. ValueError: a schema
    pilotfish cannot use (submission over ssh, a fork on another host), naming what to do."""
    site, _, machine = label.partition(".")
    if machine not in _user_site(site):
        return None
    url = get_resource_config(label, schema or get_resource_config(label).get("default_schema"))[
        "job_manager_endpoint"
    ]
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if "+" in scheme:  # slurm+ssh, pbs+gsissh, ...
        raise ValueError(
            f"{label}: access schema with job_manager_endpoint {url!r} submits "
            f"over {scheme.split('+', 1)[1]}, which pilotfish does not: run the "
            "client where jobs are submitted (the login node) with the schema "
            "that submits there (e.g. 'local')"
        )
    schemes = _schemes()
    kind = schemes.get(scheme)
    if kind is None or (kind == "local" and host not in ("", "localhost", "127.0.0.1")):
        raise ValueError(
            f"{label}: job_manager_endpoint {url!r}: pilotfish submits to "
            f"{', '.join(s + '://' for s in schemes)} (fork on localhost only)"
        )
    cfg = get_resource_config(label)
    out: dict = {"resource": kind}
    if kind == "local":
        out["fake_resources"] = True  # (RP's fork: the pilot runs here, the shape asked for)
    for k in ("cores_per_node", "gpus_per_node"):
        if cfg.get(k):
            out[k] = cfg[k]
    return out
