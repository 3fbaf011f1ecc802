"""Helpers for browser tests."""

import os


def browser_login(page, username: str, password: str = "password") -> None:
    """Log in through the real login form."""
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")


def screenshot(page, name: str) -> None:
    """Keep a screenshot in test-artifacts/ for a human to look at."""
    os.makedirs("test-artifacts", exist_ok=True)
    page.screenshot(path=f"test-artifacts/{name}.png", full_page=True)
