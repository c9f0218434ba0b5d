"""The advisor's REST endpoint, ``POST /advisor/advise``, mounted on the project's server.

Only bearers of a token may ask: the broker's admin token, or the site's advisor token
(``advisor.token`` in the site's state directory, generated 0600 at first use, to hand
to urgent users without giving them the broker). Anything else, a context's or a
node's Basic credentials included, is the same ``401``. Tokens are compared by SHA-256
digest in constant time.

The request names a deadline (``"6h"``, ``"1h30m"`` or seconds) and optionally a
threshold and quantiles; the answer is the ranked configurations, those dropped and
why, the suggestion and the best speculative pair, as the command line shows them
(``elasticsite advise --deadline``). See ``docs/advisor.md``.
"""

from __future__ import annotations

import hmac
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, field_validator

from elasticsite.advisor.deadline import DeadlineError, parse_deadline
from elasticsite.files import private_dir
from elasticsite.web.credentials import BEARER, digest, new_secret, parse_authorization
from elasticsite.web.errors import ErrorBody

if TYPE_CHECKING:
    from elasticsite.advisor.service import Advisor

__all__ = [
    "ADVISOR_TOKEN_FILE",
    "AdviceOut",
    "AdviseRequest",
    "ConfigurationOut",
    "build_router",
    "install",
    "load_advisor_token",
]

ADVISOR_TOKEN_FILE = "advisor.token"
_MIN_TOKEN = 16


def load_advisor_token(state_dir: Path) -> tuple[str, Path]:
    """The site's advisor token and its file, ``advisor.token`` in ``state_dir``,
    generated (192 random bits, mode 0600) when absent. Raises ValueError when the file
    holds a token too short to be safe, OSError when it cannot be read or made."""
    private_dir(state_dir)
    path = state_dir / ADVISOR_TOKEN_FILE
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
        except FileExistsError:  # another process made it meanwhile: read theirs
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(new_secret() + "\n")
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < _MIN_TOKEN:
        raise ValueError(
            f"{path}: the advisor token has {len(token)} characters; "
            f"use at least {_MIN_TOKEN} random ones (or delete the file to have one made)"
        )
    return token, path


# -- the contract ---------------------------------------------------------------------


class AdviseRequest(BaseModel):
    """What to rank the site's configurations against."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    deadline: str | float = Field(
        description="when the results are needed, from now: seconds, or a duration like "
        "6h, 90m, 1h30m, 2d",
        examples=["6h", 5400],
    )
    threshold: float | None = Field(
        None, ge=0, le=1, description="least probability worth starting; default the site's"
    )
    quantiles: list[float] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description="per-phase quantiles the search combines; default the site's",
    )

    @field_validator("deadline")
    @classmethod
    def _deadline(cls, v: str | float) -> float:
        try:
            return parse_deadline(v)
        except DeadlineError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("quantiles")
    @classmethod
    def _quantiles(cls, v: list[float] | None) -> list[float] | None:
        if v is None:
            return v
        bad = [q for q in v if not 0 < q < 1]
        if bad:
            raise ValueError(f"each quantile must be strictly between 0 and 1 (got {bad})")
        return sorted(set(v))


class PhaseOut(BaseModel):
    """The quantile chosen for one phase, and its bound in seconds."""

    phase: str
    quantile: float
    bound: float | None


class ConfigurationOut(BaseModel):
    """One configuration: its probability of meeting the deadline and how."""

    label: str = Field(description="resource/nodes/repository/policy, as the CLI shows it")
    resource: str
    nodes: int
    repository: str | None
    policy: str
    probability: float = Field(description="composite probability (0 when none fits)")
    bound: float | None = Field(description="seconds the run is bounded by at that probability")
    phases: list[PhaseOut]
    reason: str = Field(description="why there is no probability, when there is none")


class SpeculativeOut(BaseModel):
    """Independent configurations to start together, and the chance one meets the deadline."""

    configurations: list[ConfigurationOut]
    probability: float


class AdviceOut(BaseModel):
    """The configurations ranked for one deadline."""

    deadline: float = Field(description="seconds")
    threshold: float
    quantiles: list[float]
    confidence: float
    observations: int = Field(description="observations in the history the answer used")
    ranked: list[ConfigurationOut] = Field(description="likely enough, most likely first")
    dropped: list[ConfigurationOut] = Field(description="below the threshold, or unbounded")
    suggestion: ConfigurationOut | None = Field(
        description="the least disruptive likely-enough configuration"
    )
    speculative: SpeculativeOut | None
    speculative_reason: str = Field(description="why no speculative pair, when there is none")


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The body is not JSON"},
    401: {"model": ErrorBody, "description": "Missing or wrong token"},
    409: {"model": ErrorBody, "description": "The site configures nothing to rank"},
    422: {"model": ErrorBody, "description": "Invalid fields (a deadline that is no duration)"},
}


# -- who may ask ---------------------------------------------------------------------


def _unauthorized() -> HTTPException:
    return HTTPException(401, "invalid or missing credentials", {"WWW-Authenticate": BEARER})


def bearer_check(
    token: str, admin: Callable[[Request], bool] | None = None
) -> Callable[[Request], None]:
    """A dependency admitting the advisor token's bearer, or whoever ``admin`` admits."""
    expected = digest(token)

    def check(request: Request) -> None:
        cred = parse_authorization(request.headers.get("authorization"))
        ok = (
            cred is not None
            and cred[0] == "bearer"
            and hmac.compare_digest(digest(cred[2]), expected)
        )
        if not ok and not (admin is not None and admin(request)):
            raise _unauthorized()

    return check


def build_router(
    advisor: Advisor, token: str, admin: Callable[[Request], bool] | None = None
) -> APIRouter:
    """The advisor's route, answering from ``advisor`` to bearers of ``token`` (or admins)."""
    from elasticsite.advisor.service import NothingToRank

    router = APIRouter(prefix="/advisor", tags=["advisor"])
    allowed = bearer_check(token, admin)

    @router.post("/advise", responses=_ERRORS, dependencies=[Depends(allowed)])
    async def advise(body: AdviseRequest) -> AdviceOut:
        """Rank every configured configuration against a deadline.

        Each configuration (resource x node count x repository x policy) gets the
        highest probability with which its phases' bounds fit the deadline; those below
        the threshold are in ``dropped`` with their reason. The suggestion is the least
        disruptive policy among the likely-enough ones (next-to-run before preemption).
        """
        deadline = float(body.deadline)  # the validator parsed it
        try:
            advice = await run_in_threadpool(
                advisor.advise, deadline, body.threshold, body.quantiles
            )
        except NothingToRank as exc:
            raise HTTPException(409, str(exc)) from None
        return AdviceOut.model_validate(advice.to_json())

    return router


def install(
    app: FastAPI, advisor: Advisor, token: str, admin: Callable[[Request], bool] | None = None
) -> None:
    """Mount the advisor's route on ``app`` (whose error answers the broker installed)."""
    app.include_router(build_router(advisor, token, admin))
    app.state.advisor = advisor
