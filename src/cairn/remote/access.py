"""Who may read a repository published to S3: everyone, over plain HTTP, as pip, uv and a TUF client do.

S3 objects are private unless a policy says otherwise, so without one every page of the index answers 403 to
an anonymous client. The publisher therefore keeps two statements in the bucket policy, identified by their
``Sid`` (every other statement is left as it was):

* ``CairnPublicRead``: ``s3:GetObject`` on ``arn:aws:s3:::<bucket>/<prefix>/*`` for every repository prefix
  published to the bucket — every object of a repository, nothing outside the repositories;
* ``CairnPublicList``: ``s3:ListBucket`` on ``arn:aws:s3:::<bucket>`` — without it S3 answers 403, not 404,
  for a key that does not exist, and uv treats a 403 from an index as fatal where a 404 means "not on this
  index". S3 decides 404 or 403 for a GetObject, which has no ``s3:prefix`` to condition on, so this grant
  is not limited to the prefix: anyone may list the bucket's key names (only the repositories' objects are
  readable). Give the index a bucket of its own if other key names must stay private.

A repository at the bucket's root (``s3://bucket`` with no prefix) would need ``arn:aws:s3:::<bucket>/*``: every
object of the bucket, whatever else it holds, world-readable. That grant is only made when asked for by name
(``cairn publish --public-bucket``); without it the publish stops with one line before anything is written.

S3 has no conditional write for a bucket policy: it is read, merged and written, then read again to confirm
(two first publishes to different prefixes of one bucket at the same moment could otherwise drop a grant).

Pure functions: ``cairn.remote.backend.S3Backend.grant_public_read`` reads and writes the policy.
"""

from __future__ import annotations

import json
from typing import Any

from cairn.errors import CairnError

READ_SID = "CairnPublicRead"
LIST_SID = "CairnPublicList"
VERSION = "2012-10-17"


def partition(region: str) -> str:
    """The ARN partition of a region (``aws-cn`` for China, ``aws-us-gov`` for GovCloud)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def whole_bucket_refusal(bucket: str) -> CairnError:
    return CairnError(f"s3://{bucket}: no prefix, so a public-read grant would make every object of the bucket world-readable "
                      f"— publish to s3://{bucket}/PREFIX, pass --public-bucket if the whole bucket is the repository, or "
                      "--no-public-read; nothing was published")


def merged(existing: bytes | None, bucket: str, prefix: str, region: str = "us-east-1", *,
           whole_bucket: bool = False) -> bytes | None:
    """The policy to write so that ``existing`` also grants public reads of ``prefix`` (``""`` or ``"a/b/"``),
    or None when it already does. One read statement lists every repository prefix of the bucket (a bucket
    policy holds at most 20 KB); statements with other Sids are kept as they are, in their order. ``prefix``
    ``""`` (the whole bucket) is refused unless ``whole_bucket``."""
    if not prefix and not whole_bucket:
        raise whole_bucket_refusal(bucket)
    if any(c in prefix for c in "*?"):
        raise CairnError(f"s3://{bucket}/{prefix}: a prefix with '*' or '?' would widen the public-read grant "
                         "beyond the repository — publish to a prefix of plain names")
    arn = f"arn:{partition(region)}:s3:::{bucket}"
    policy, current = _statements(existing, bucket)
    by_sid = {s.get("Sid"): s for s in current if isinstance(s, dict)}
    read = by_sid.get(READ_SID, {})
    resources = _as_list(read.get("Resource")) if _grants(read, "s3:GetObject") else []
    wanted = [_statement(READ_SID, "s3:GetObject", sorted({*resources, f"{arn}/{prefix}*"})),
              _statement(LIST_SID, "s3:ListBucket", arn)]
    if _same(read, wanted[0]) and _same(by_sid.get(LIST_SID, {}), wanted[1]):
        return None
    policy["Statement"] = [s for s in current if not (isinstance(s, dict) and s.get("Sid") in (READ_SID, LIST_SID))] + wanted
    return json.dumps(policy, sort_keys=True).encode()


def _statements(existing: bytes | None, bucket: str) -> tuple[dict[str, Any], list[Any]]:
    if not existing:
        return {"Version": VERSION}, []
    try:
        policy = json.loads(existing)
        current = policy["Statement"]
    except (ValueError, KeyError, TypeError):
        raise CairnError(f"s3://{bucket}: its bucket policy is not a JSON policy with a Statement — fix it, or delete "
                         "it (aws s3api delete-bucket-policy) and publish again") from None
    return policy, current if isinstance(current, list) else [current]


def _statement(sid: str, action: str, resource: str | list[str]) -> dict[str, Any]:
    if isinstance(resource, list) and len(resource) == 1:
        resource = resource[0]
    return {"Sid": sid, "Effect": "Allow", "Principal": "*", "Action": action, "Resource": resource}


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value or [] if isinstance(v, str)]


def _norm(value: Any) -> Any:
    """A value S3 may hand back in another form: a one-element list for a string, ``{"AWS": "*"}`` for ``*``."""
    if isinstance(value, list):
        return _norm(value[0]) if len(value) == 1 else sorted(_norm(v) for v in value)
    if isinstance(value, dict) and set(value) == {"AWS"}:
        return _norm(value["AWS"])
    return value


def _grants(statement: dict[str, Any], action: str) -> bool:
    """A statement of cairn's shape, whatever its resources: anyone may ``action``, with no condition."""
    shape = _statement(statement.get("Sid", ""), action, "")
    return set(statement) == set(shape) and all(_norm(statement[k]) == _norm(shape[k]) for k in shape if k != "Resource")


def _same(have: dict[str, Any], want: dict[str, Any]) -> bool:
    return set(have) == set(want) and all(_norm(have[k]) == _norm(v) for k, v in want.items())
