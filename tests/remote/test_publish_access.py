"""The bucket policy the publisher keeps (``cairn.remote.access``): merged into what the bucket already has,
written only when something is missing, read back in the forms S3 normalises a policy to, and a prefix that
would widen the public grant refused in one line."""

from __future__ import annotations

import json

import pytest

from cairn.errors import CairnError
from cairn.remote.access import LIST_SID, READ_SID, merged


def statements(policy: bytes) -> dict[str, dict]:  # type: ignore[type-arg]
    return {s["Sid"]: s for s in json.loads(policy)["Statement"]}


def test_a_bucket_without_a_policy_gets_read_of_the_prefix_and_list_of_the_bucket():
    policy = merged(None, "rel", "main/")
    assert policy is not None
    got = statements(policy)
    assert got[READ_SID] == {"Sid": READ_SID, "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                             "Resource": "arn:aws:s3:::rel/main/*"}
    assert got[LIST_SID] == {"Sid": LIST_SID, "Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket",
                             "Resource": "arn:aws:s3:::rel"}
    assert merged(policy, "rel", "main/") is None  # nothing to write a second time


def test_the_forms_s3_hands_a_policy_back_in_count_as_granted():
    normalised = {"Version": "2012-10-17", "Statement": [
        {"Sid": READ_SID, "Effect": "Allow", "Principal": {"AWS": "*"}, "Action": ["s3:GetObject"],
         "Resource": ["arn:aws:s3:::rel/main/*"]},
        {"Sid": LIST_SID, "Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::rel"}]}
    assert merged(json.dumps(normalised).encode(), "rel", "main/") is None


def test_other_statements_stay_and_every_prefix_shares_one_read_statement():
    theirs = {"Sid": "Theirs", "Effect": "Deny", "Principal": "*", "Action": "s3:DeleteBucket", "Resource": "arn:aws:s3:::rel"}
    first = merged(json.dumps({"Version": "2012-10-17", "Statement": theirs}).encode(), "rel", "a/")
    second = merged(first, "rel", "b/")
    assert second is not None
    got = statements(second)
    assert got["Theirs"] == theirs
    assert got[READ_SID]["Resource"] == ["arn:aws:s3:::rel/a/*", "arn:aws:s3:::rel/b/*"]
    assert merged(second, "rel", "a/") is None


def test_a_read_statement_someone_narrowed_with_a_condition_is_put_back():
    narrowed = {"Version": "2012-10-17", "Statement": [
        {"Sid": READ_SID, "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::rel/main/*",
         "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}},
        {"Sid": LIST_SID, "Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::rel"}]}
    policy = merged(json.dumps(narrowed).encode(), "rel", "main/")
    assert policy is not None and "Condition" not in statements(policy)[READ_SID]


def test_other_partitions_name_their_own_arns():
    policy = merged(None, "rel", "main/", region="cn-north-1")
    assert policy is not None and statements(policy)[READ_SID]["Resource"] == "arn:aws-cn:s3:::rel/main/*"


def test_the_whole_bucket_is_granted_only_when_asked_for_by_name():
    with pytest.raises(CairnError, match=r"^s3://rel: no prefix, so a public-read grant would make every object of the bucket "
                                         r"world-readable — .*--public-bucket"):
        merged(None, "rel", "")
    policy = merged(None, "rel", "", whole_bucket=True)
    assert policy is not None and statements(policy)[READ_SID]["Resource"] == "arn:aws:s3:::rel/*"


@pytest.mark.parametrize("prefix", ["main*/", "ma?n/"])
def test_a_prefix_that_would_widen_the_grant_is_refused(prefix):
    with pytest.raises(CairnError, match=r"^s3://rel/.*: a prefix with '\*' or '\?' would widen the public-read grant"):
        merged(None, "rel", prefix)


def test_a_policy_that_is_not_json_is_one_line_naming_the_bucket():
    with pytest.raises(CairnError, match=r"^s3://rel: its bucket policy is not a JSON policy"):
        merged(b"<Policy/>", "rel", "main/")
