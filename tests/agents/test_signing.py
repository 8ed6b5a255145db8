import time

import pytest

from agents.signing import SignatureError, sign, verify

BODY = b'{"outcome": "approved"}'


def test_a_signature_made_with_the_secret_verifies_and_returns_its_timestamp():
    header = sign("s3cret", BODY, timestamp=1_000)
    assert verify("s3cret", header, BODY, now=1_010) == 1_000


def test_a_changed_body_is_refused():
    header = sign("s3cret", BODY, timestamp=1_000)
    with pytest.raises(SignatureError, match="does not match"):
        verify("s3cret", header, BODY + b" ", now=1_000)


def test_another_secret_is_refused():
    header = sign("s3cret", BODY, timestamp=1_000)
    with pytest.raises(SignatureError, match="does not match"):
        verify("other", header, BODY, now=1_000)


def test_a_replay_outside_the_tolerance_is_refused():
    header = sign("s3cret", BODY, timestamp=1_000)
    with pytest.raises(SignatureError, match="possible replay"):
        verify("s3cret", header, BODY, now=1_000 + 301)


def test_a_rotated_secret_matches_any_listed_signature():
    old = sign("old", BODY, timestamp=1_000).split(",")[1]
    header = sign("new", BODY, timestamp=1_000) + "," + old
    assert verify("old", header, BODY, now=1_000) == 1_000


def test_a_receiver_holding_the_new_and_the_old_secret_accepts_either():
    for used in ("new", "old"):
        header = sign(used, BODY, timestamp=1_000)
        assert verify(["new", "old"], header, BODY, now=1_000) == 1_000
    with pytest.raises(SignatureError, match="does not match the body and any of the 2 secrets"):
        verify(["new", "old"], sign("third", BODY, timestamp=1_000), BODY, now=1_000)


def test_a_missing_secret_is_refused_as_a_signature_error_and_bytes_of_any_kind_verify():
    header = sign(b"s3cret", BODY, timestamp=1_000)
    with pytest.raises(SignatureError, match="no secret configured"):
        verify(None, header, BODY, now=1_000)  # type: ignore[arg-type]
    assert verify(bytearray(b"s3cret"), header, BODY, now=1_000) == 1_000
    assert verify([bytearray(b"old"), b"s3cret"], header, BODY, now=1_000) == 1_000


def test_an_empty_list_of_secrets_is_refused():
    for none in ([], [""], ("",), [None]):
        with pytest.raises(SignatureError, match="no secret configured"):
            verify(none, sign("s3cret", BODY), BODY)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "missing"),
        ("", "missing"),
        ("v1=abc", "no t= timestamp"),
        ("t=1000", "no v1= signature"),
        ("t=soon,v1=abc", "not a whole number"),
        ("t=1000,v1", "malformed"),
    ],
)
def test_a_malformed_header_is_refused_with_a_reason(header, message):
    with pytest.raises(SignatureError, match=message):
        verify("s3cret", header, BODY, now=1_000)


def test_an_empty_secret_is_refused_on_both_sides():
    with pytest.raises(SignatureError):
        sign("", BODY)
    with pytest.raises(SignatureError):
        verify("", "t=1,v1=x", BODY)


@pytest.mark.parametrize("signature", ["\u00e9", "abc\u00e9", "\u0661\u0662"])
def test_a_signature_outside_ascii_is_refused_naming_it(signature):
    header = f"t={int(time.time())},v1={signature}"

    with pytest.raises(SignatureError, match="has characters outside ASCII"):
        verify("whsec_x", header, b"{}")


def test_a_signature_outside_ascii_beside_a_good_one_is_refused():
    header = sign("s3cret", BODY, timestamp=1_000) + ",v1=\u00e9"

    with pytest.raises(SignatureError, match="outside ASCII"):
        verify("s3cret", header, BODY, now=1_000)
