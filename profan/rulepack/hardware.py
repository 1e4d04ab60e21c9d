"""Hardware priors: what bandwidth each link type can deliver, per device, as data (``rules/hardware/*.toml``).

Profilers report what a collective achieved; judging it needs an expectation. The figures live in the rule pack,
each with the public source it came from, and a user file (``profan analyze DIR --hardware FILE``) can override
any figure, add devices, or pin the device when the profile does not record it (Ascend text exports do not):

    [assume]
    device = "ascend_910b"

    [[link]]
    device = "ascend_910b"
    link = "HCCS"
    usable_gbps = 25.0
    source = "our own hccl_test runs, 2025-06"

A prior is only ever applied to a device that was detected or assumed; the report says which it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profan.model.errors import ProfanInputError
from profan.rulepack.paths import rules_dir
from profan.rulepack.toml_file import load_toml


@dataclass(frozen=True)
class LinkPrior:
    device: str  # device id, or "any" for host PCIe / NICs
    link: str  # HCCS, RDMA, PCIE, SIO, NVLink3, PCIe4, NIC400, …
    usable_gbps: float | None  # what a healthy transfer reaches, GB/s per direction
    peak_gbps: float | None = None
    scope: str = ""
    measured: str = ""
    source: str = ""
    file: str = ""

    def describe(self) -> str:
        fig = f"{self.usable_gbps:g} GB/s" if self.usable_gbps is not None else "no usable figure"
        return f"{self.device} {self.link} {fig} ({self.scope}; source: {self.source}; {self.file})"


@dataclass(frozen=True)
class Device:
    id: str
    vendor: str
    name: str
    match: str = ""  # regex on a GPU's deviceProperties name
    platform_version: tuple[int, ...] = ()  # msprof info.json platform_version
    scale_up: str = ""  # link type used inside a node (GPU)


@dataclass
class Hardware:
    links: dict[tuple[str, str], LinkPrior] = field(default_factory=dict)
    devices: dict[str, Device] = field(default_factory=dict)
    assume: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def prior(self, device: str | None, link: str) -> LinkPrior | None:
        """The prior for `link` on `device` (falls back to device-independent entries such as PCIe5)."""
        hit = self.links.get((device, link)) if device else None
        return hit or self.links.get(("any", link))

    def detect_gpu(self, name: str | None) -> Device | None:
        if self.assume.get("device") in self.devices:
            return self.devices[self.assume["device"]]
        if not name:
            return None
        for device in self.devices.values():
            if device.match and re.search(device.match, name):
                return device
        return None

    def detect_ascend(self, platform_version: int | None) -> tuple[Device | None, str]:
        """(device, how it was decided)."""
        assumed = self.assume.get("device")
        if assumed in self.devices:
            return self.devices[assumed], f"assumed by {self.assume.get('_file', 'the hardware file')}"
        if platform_version is not None:
            for device in self.devices.values():
                if device.vendor == "ascend" and platform_version in device.platform_version:
                    return device, f"msprof info.json platform_version {platform_version}"
        return None, "not recorded in the profile"


def _num(path: Path, entry: dict[str, Any], key: str) -> float | None:
    v = entry.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise ProfanInputError(
            path, f"link {entry.get('device')}/{entry.get('link')}: {key} must be a positive number (GB/s), got {v!r}"
        )
    return float(v)


TOP_KEYS = {"device", "link", "assume"}
LINK_KEYS = {"device", "link", "usable_gbps", "peak_gbps", "scope", "measured", "source"}
DEVICE_KEYS = {"id", "vendor", "name", "match", "platform_version", "scale_up"}


def _check_keys(path: Path, what: str, got: dict[str, Any], allowed: set[str]) -> None:
    """A misspelt key would silently leave a figure unapplied: refuse it, naming the keys that exist."""
    bad = sorted(set(got) - allowed)
    if bad:
        raise ProfanInputError(path, f"unknown {what} key(s) {', '.join(bad)} (use {', '.join(sorted(allowed))})")


def _add(hardware: Hardware, path: Path, doc: dict[str, Any], label: str) -> None:
    _check_keys(path, "top-level", doc, TOP_KEYS)
    for d in doc.get("device", []):
        _check_keys(path, "[[device]]", d, DEVICE_KEYS)
        if not d.get("id"):
            raise ProfanInputError(path, "a [[device]] entry has no id")
        if d.get("match"):
            try:
                re.compile(str(d["match"]))
            except re.error as exc:
                raise ProfanInputError(path, f"device {d['id']}: invalid regular expression: {exc}") from None
        hardware.devices[d["id"]] = Device(
            id=d["id"],
            vendor=str(d.get("vendor", "")),
            name=str(d.get("name", d["id"])),
            match=str(d.get("match", "")),
            platform_version=tuple(int(x) for x in d.get("platform_version", [])),
            scale_up=str(d.get("scale_up", "")),
        )
    for e in doc.get("link", []):
        _check_keys(path, "[[link]]", e, LINK_KEYS)
        if not e.get("device") or not e.get("link"):
            raise ProfanInputError(path, "a [[link]] entry needs device and link")
        hardware.links[(e["device"], e["link"])] = LinkPrior(
            device=e["device"],
            link=e["link"],
            usable_gbps=_num(path, e, "usable_gbps"),
            peak_gbps=_num(path, e, "peak_gbps"),
            scope=str(e.get("scope", "")),
            measured=str(e.get("measured", "")),
            source=str(e.get("source", "")),
            file=label,
        )
    if isinstance(doc.get("assume"), dict):
        hardware.assume = {**doc["assume"], "_file": label}


def load(user: str | Path | None = None) -> Hardware:
    """Built-in priors (``rules/hardware/*.toml``), then the user's file on top (its entries win)."""
    hardware = Hardware()
    for path in sorted((rules_dir() / "hardware").glob("*.toml")):
        _add(hardware, path, load_toml(path, "hardware file"), f"rules/hardware/{path.name}")
        hardware.files.append(f"rules/hardware/{path.name}")
    if user is not None:
        p = Path(user)
        _add(hardware, p, load_toml(p, "hardware file"), str(p))
        hardware.files.append(str(p))
        dev = hardware.assume.get("device")
        if dev is not None and dev not in hardware.devices:
            raise ProfanInputError(
                p, f"[assume] device {dev!r} is not a known device ({', '.join(sorted(hardware.devices))})"
            )
    return hardware
