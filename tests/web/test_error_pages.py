"""403, 404 and 500 pages: the portal's layout and navigation, and the reason."""

from __future__ import annotations

import logging

import pytest
from django.test import RequestFactory
from django.urls import reverse
from django.views.defaults import server_error


@pytest.mark.django_db
def test_a_403_uses_the_portal_layout_and_says_why(client, support_agent):
    client.force_login(support_agent)

    response = client.get(reverse("queue"))

    assert response.status_code == 403
    page = response.content.decode()
    assert '<nav aria-label="Main">' in page
    assert "Log out" in page
    assert "The review queue is for reviewers." in page


@pytest.mark.django_db
def test_a_404_uses_the_portal_layout_and_says_what_was_not_found(client, settings, reviewer):
    settings.DEBUG = False
    client.force_login(reviewer)

    response = client.get(reverse("thread_detail", args=["00000000-0000-0000-0000-000000000000"]))

    assert response.status_code == 404
    page = response.content.decode()
    assert '<nav aria-label="Main">' in page
    assert "No such thread" in page


@pytest.mark.django_db
def test_an_unknown_address_404_names_the_path(client, settings, reviewer):
    settings.DEBUG = False
    client.force_login(reviewer)

    response = client.get("/no/such/page/")

    assert response.status_code == 404
    assert "There is no page at /no/such/page/." in response.content.decode()


def test_the_500_page_uses_the_portal_layout_without_touching_the_database():
    # No django_db mark: any query here would fail the test.
    response = server_error(RequestFactory().get("/"))

    assert response.status_code == 500
    page = response.content.decode()
    assert '<a class="brand" href="/">Reviewer portal</a>' in page
    assert "Something went wrong on our side" in page
    assert "portal.css" in page


@pytest.mark.django_db
def test_an_expected_403_is_logged_as_one_line_without_a_traceback(client, support_agent, caplog):
    client.force_login(support_agent)

    with caplog.at_level(logging.WARNING, logger="django.request"):
        client.get(reverse("queue"))

    refusals = [r for r in caplog.records if r.name == "django.request"]
    assert refusals and refusals[0].getMessage().startswith("Forbidden")
    assert all(r.exc_info is None for r in refusals)
