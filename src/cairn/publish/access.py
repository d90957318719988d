"""Who may read a repository published to S3: everyone, over plain HTTP, as pip, uv and a TUF client do.

S3 objects are private unless a policy says otherwise, so without one every page of the index answers 403 to
an anonymous client. The publisher therefore keeps two statements in the bucket policy, identified by their
``Sid`` (every other statement is left as it was):

* ``s3:GetObject`` on ``arn:aws:s3:::<bucket>/<prefix>/*`` — read every object of the repository, and nothing
  outside its prefix;
* ``s3:ListBucket`` on ``arn:aws:s3:::<bucket>`` — without it S3 answers 403, not 404, for a key that does not
  exist, and uv treats a 403 from an index as fatal where a 404 means "not on this index". S3 decides 404 or
  403 for a GetObject, which has no ``s3:prefix`` to condition on, so this grant cannot be limited to the
  prefix: anyone may list the bucket's key names (only the prefix's objects are readable). Give the index a
  bucket of its own if other key names must stay private.

Pure functions: ``cairn.publish.backend.S3Backend.grant_public_read`` reads and writes the policy.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cairn.errors import CairnError

LIST_SID = "CairnPublicList"
VERSION = "2012-10-17"


def partition(region: str) -> str:
    """The ARN partition of a region (``aws-cn`` for China, ``aws-us-gov`` for GovCloud)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def read_sid(prefix: str) -> str:
    """The Sid of one prefix's read grant: a digest, because a Sid holds only letters and digits."""
    return "CairnPublicRead" + hashlib.sha256(prefix.encode()).hexdigest()[:16]


def statements(bucket: str, prefix: str, region: str = "us-east-1") -> list[dict[str, Any]]:
    """The two statements a public repository at ``bucket``/``prefix`` (``""`` or ``"a/b/"``) needs."""
    if any(c in prefix for c in "*?"):
        raise CairnError(f"s3://{bucket}/{prefix}: a prefix with '*' or '?' would widen the public-read grant "
                         "beyond the repository — publish to a prefix of plain names")
    arn = f"arn:{partition(region)}:s3:::{bucket}"
    return [
        {"Sid": read_sid(prefix), "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"{arn}/{prefix}*"},
        {"Sid": LIST_SID, "Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": arn},
    ]


def merged(existing: bytes | None, bucket: str, prefix: str, region: str = "us-east-1") -> bytes | None:
    """The policy to write so that ``existing`` grants the repository's public reads, or None when it already
    does. Statements with other Sids are kept as they are, in their order; ours are replaced or appended."""
    wanted = statements(bucket, prefix, region)
    if existing:
        try:
            policy = json.loads(existing)
            current = policy["Statement"]
        except (ValueError, KeyError, TypeError):
            raise CairnError(f"s3://{bucket}: its bucket policy is not a JSON policy with a Statement list — fix or "
                             "delete it (aws s3api delete-bucket-policy) and publish again") from None
        current = current if isinstance(current, list) else [current]
    else:
        policy, current = {"Version": VERSION}, []
    by_sid = {s.get("Sid"): s for s in current if isinstance(s, dict)}
    if all(_same(by_sid.get(s["Sid"]), s) for s in wanted):
        return None
    ours = {s["Sid"] for s in wanted}
    policy["Statement"] = [s for s in current if not (isinstance(s, dict) and s.get("Sid") in ours)] + wanted
    return json.dumps(policy, sort_keys=True).encode()


def _same(have: dict[str, Any] | None, want: dict[str, Any]) -> bool:
    """A statement S3 may hand back in another form: a one-element list for a string, ``{"AWS": "*"}`` for ``*``."""
    if have is None:
        return False

    def norm(value: Any) -> Any:
        if isinstance(value, list) and len(value) == 1:
            return norm(value[0])
        if isinstance(value, dict) and set(value) == {"AWS"}:
            return norm(value["AWS"])
        return value

    return set(have) == set(want) and all(norm(have[k]) == norm(v) for k, v in want.items())
