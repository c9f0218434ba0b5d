"""What went wrong with a cloud call, in categories the manager can act on.

Every driver raises :class:`CloudError` only (here, so that what raises it without
being a driver imports little); a driver that knows why sets its
:attr:`CloudError.kind`:

=================  =========================================================  ==========
kind               meaning                                                    retry?
=================  =========================================================  ==========
``quota``          the account's limit on instances, cores or addresses       later
``capacity``       the provider has no capacity of that type or zone now      elsewhere
``credentials``    credentials missing, wrong, expired or not allowed         no
``not_found``      the image, flavour or network named does not exist         no
``throttled``      too many API calls: the provider asks to slow down         backoff
``transient``      a provider-side error or a network failure                 backoff
``unknown``        anything else                                              as usual
=================  =========================================================  ==========

The tables below translate each provider's error codes (documented by the provider,
checked against recorded responses).
"""

from __future__ import annotations

import enum

__all__ = ["EC2_CODES", "CloudError", "ErrorKind", "ec2_kind", "http_kind", "openstack_kind"]


class ErrorKind(enum.StrEnum):
    """Why a cloud call failed (see the module table)."""

    QUOTA = "quota"
    CAPACITY = "capacity"
    CREDENTIALS = "credentials"
    NOT_FOUND = "not_found"
    THROTTLED = "throttled"
    TRANSIENT = "transient"
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        """Worth trying again on the same cloud after a backoff."""
        return self in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT, ErrorKind.UNKNOWN)

    @property
    def blocks_cloud(self) -> bool:
        """No launch on this cloud can succeed until an operator fixes something."""
        return self in (ErrorKind.CREDENTIALS, ErrorKind.NOT_FOUND)


class CloudError(Exception):
    """A cloud call failed; the message names the cloud and the operation, ``kind``
    says why when the driver knows (:mod:`elasticsite.clouds.errors`) and ``call`` names
    the provider's API call that failed (``RunInstances``, ``compute.create_server``,
    ``list_nodes`` ...), empty when no call was made."""

    kind: ErrorKind = ErrorKind.UNKNOWN
    call: str = ""

    def __init__(self, *args: object, kind: ErrorKind | None = None, call: str = "") -> None:
        super().__init__(*args)  # cooperative: CloudStateError is a StateFileError too
        if kind is not None:
            self.kind = kind
        if call:
            self.call = call


K = ErrorKind
EC2_CODES: dict[str, ErrorKind] = {
    "InstanceLimitExceeded": K.QUOTA,
    "VcpuLimitExceeded": K.QUOTA,
    "MaxSpotInstanceCountExceeded": K.QUOTA,
    "AddressLimitExceeded": K.QUOTA,
    "InsufficientInstanceCapacity": K.CAPACITY,
    "InsufficientHostCapacity": K.CAPACITY,
    "InsufficientReservedInstanceCapacity": K.CAPACITY,
    "InsufficientCapacity": K.CAPACITY,
    "SpotMaxPriceTooLow": K.CAPACITY,
    "Unsupported": K.CAPACITY,
    "AuthFailure": K.CREDENTIALS,
    "UnauthorizedOperation": K.CREDENTIALS,
    "InvalidClientTokenId": K.CREDENTIALS,
    "SignatureDoesNotMatch": K.CREDENTIALS,
    "ExpiredToken": K.CREDENTIALS,
    "RequestExpired": K.CREDENTIALS,
    "OptInRequired": K.CREDENTIALS,
    "Blocked": K.CREDENTIALS,
    "InvalidAMIID.NotFound": K.NOT_FOUND,
    "InvalidAMIID.Malformed": K.NOT_FOUND,
    "InvalidAMIID.Unavailable": K.NOT_FOUND,
    "InvalidSubnetID.NotFound": K.NOT_FOUND,
    "InvalidGroup.NotFound": K.NOT_FOUND,
    "InvalidKeyPair.NotFound": K.NOT_FOUND,
    "InvalidInstanceType": K.NOT_FOUND,
    "RequestLimitExceeded": K.THROTTLED,
    "Throttling": K.THROTTLED,
    "ThrottlingException": K.THROTTLED,
    "InternalError": K.TRANSIENT,
    "InternalFailure": K.TRANSIENT,
    "ServiceUnavailable": K.TRANSIENT,
    "Unavailable": K.TRANSIENT,
}
"""EC2 API error codes and what they mean to a manager."""


def ec2_kind(code: str, status: int = 0) -> ErrorKind:
    """The kind of an EC2 error ``code`` (HTTP ``status`` for codes not listed)."""
    found = EC2_CODES.get(code)
    if found is not None:
        return found
    if status in (401, 403):
        return K.CREDENTIALS
    if status == 429:
        return K.THROTTLED
    if status >= 500:
        return K.TRANSIENT
    return K.UNKNOWN


_TRANSIENT_EXCEPTIONS = frozenset(
    {"ConnectFailure", "ConnectTimeout", "ConnectionError", "RetriableConnectionFailure",
     "SSLError", "UnknownConnectionError", "ServiceUnavailable", "GatewayTimeout",
     "BadGateway", "InternalServerError", "timeout", "TimeoutError", "ConnectionRefusedError",
     "ConnectionResetError"}
)  # fmt: skip
_CREDENTIAL_EXCEPTIONS = frozenset(
    {"Unauthorized", "AuthorizationFailure", "MissingAuthPlugin", "InvalidCredsError",
     "NoMatchingPlugin", "MissingRequiredOptions"}
)  # fmt: skip


_CAPACITY_WORDS = (
    "no valid host", "insufficient capacity", "out of capacity", "not available in this region",
    "zone_resource_pool_exhausted", "skunotavailable", "allocationfailed",
)  # fmt: skip
_QUOTA_WORDS = ("limit exceeded", "exceed your", "quota")


def http_kind(status: int, message: str = "") -> ErrorKind:
    """The kind of an HTTP API's error answer ``status`` (and its message), for the
    providers without error codes of their own."""
    text = message.lower()
    if status == 429 or "rate limit" in text or "too many requests" in text:
        return K.THROTTLED
    if any(word in text for word in _CAPACITY_WORDS):
        return K.CAPACITY
    if status == 413 or any(word in text for word in _QUOTA_WORDS):
        return K.QUOTA
    if status in (401, 403):
        return K.CREDENTIALS
    if status == 404 or "could not be found" in text or "not found" in text:
        return K.NOT_FOUND
    if status >= 500:
        return K.TRANSIENT
    return K.UNKNOWN


def openstack_kind(exception: str, status: int, message: str) -> ErrorKind:
    """The kind of an openstacksdk or keystoneauth exception (by class name, so this
    module needs neither), with its HTTP ``status`` and message."""
    if exception in _CREDENTIAL_EXCEPTIONS:
        return K.CREDENTIALS
    if exception in _TRANSIENT_EXCEPTIONS and not status:
        return K.TRANSIENT
    if exception in ("ResourceNotFound", "NotFoundException", "EndpointNotFound") and not status:
        return K.NOT_FOUND
    found = http_kind(status, message)
    if found is K.UNKNOWN and exception in _TRANSIENT_EXCEPTIONS:
        return K.TRANSIENT
    return found
