"""Drives the sandbox inbox page in a real browser: Debian's Chromium, headless,
through Selenium and Debian's chromedriver (no browser download).

Run by tests/api/browser.rs, which talks to it line by line:
  it prints `ready` once the page is loaded and its live updates are connected;
  it reads a message id from stdin, waits for that message's card to appear on the
  page (no reload), optionally saves a screenshot (--screenshot PATH), clicks the
  card's "Undeliverable" button, waits for the card to show UNDELIVERABLE, and prints
  `clicked`.
Every wait has a deadline; the whole run is bounded by --timeout seconds.
"""

import argparse
import signal
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inbox", required=True, help="the inbox page's URL")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    parser.add_argument("--screenshot", help="save a PNG of the page here")
    parser.add_argument("--timeout", type=int, default=90)
    args = parser.parse_args()
    # The whole run, whatever hangs (the browser, the driver).
    signal.alarm(args.timeout)

    options = webdriver.ChromeOptions()
    options.binary_location = args.chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1100,900", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=args.chromedriver), options=options)
    try:
        driver.set_page_load_timeout(20)
        # A card is replaced whole when its message changes.
        wait = WebDriverWait(driver, 20, ignored_exceptions=(
            NoSuchElementException, StaleElementReferenceException))
        driver.get(args.inbox)
        wait.until(EC.text_to_be_present_in_element((By.ID, "live"), "live"))
        wait.until(lambda d: "on" in d.find_element(By.ID, "live").get_attribute("class"))
        # Gone if the page reloads.
        driver.execute_script("window.stillTheSamePage = true;")
        print("ready", flush=True)

        message_id = sys.stdin.readline().strip()
        card = By.ID, f"m-{message_id}"
        # Read afresh each time: a status change replaces the card between two reads.
        text = wait.until(lambda d: d.find_element(*card).text)
        assert driver.execute_script("return window.stillTheSamePage === true;"), "the page reloaded"
        assert "ACCEPTED" in text or "ROUTING" in text, text
        if args.screenshot:
            driver.save_screenshot(args.screenshot)

        def click(d):
            d.find_element(*card).find_element(
                By.CSS_SELECTOR, 'button[value="UNDELIVERABLE"]').click()
            return True

        wait.until(click)
        wait.until(lambda d: d.find_element(By.ID, f"m-{message_id}").get_attribute("data-status")
                   == "UNDELIVERABLE")
        assert driver.execute_script("return window.stillTheSamePage === true;"), "the page reloaded"
        print("clicked", flush=True)
        return 0
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
