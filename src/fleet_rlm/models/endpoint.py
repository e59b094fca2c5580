"""Is the configured model endpoint answering? One probe for ``fleet doctor`` and the server's readiness."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from fleet_rlm.config.sections import LMSettings

PROBE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class EndpointCheck:
    ok: bool
    message: str
    fix: str | None = None


def auth_headers(lm: LMSettings) -> dict[str, str]:
    """The headers a request to the endpoint carries: its API key, when one is set."""
    if lm.api_key is None:
        return {}
    return {"Authorization": f"Bearer {lm.api_key.get_secret_value()}"}


def probe_endpoint(lm: LMSettings) -> EndpointCheck:
    """``GET {base_url}/models``, as OpenAI-compatible servers answer it. A provider's default endpoint
    (no base URL) is not probed: that would spend the person's quota on a check."""
    if not lm.model:
        return EndpointCheck(False, "no model configured", "set FLEET_LM_MODEL (and FLEET_LM_BASE_URL)")
    if not lm.base_url:
        return EndpointCheck(True, f"{lm.model} via the provider's default endpoint (not probed)")
    headers = auth_headers(lm)
    url = lm.base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=headers, timeout=min(lm.timeout, PROBE_TIMEOUT_SECONDS))
    except httpx.HTTPError as exc:
        return EndpointCheck(False, f"{url}: {exc}", "check FLEET_LM_BASE_URL and that the server runs")
    if response.status_code in (401, 403):
        return EndpointCheck(False, f"{url} refused the API key ({response.status_code})", "set FLEET_LM_API_KEY")
    if response.status_code >= 500:
        return EndpointCheck(False, f"{url} answered {response.status_code}", "check the model server")
    return EndpointCheck(True, f"{url} answered {response.status_code}")
