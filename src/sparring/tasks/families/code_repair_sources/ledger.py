"""Base ``ledger``: bank accounts with overdraft limits and transfers in integer cents."""

from sparring.tasks.families.code_repair_sources import BaseSource

_INIT = r'''"""Bank accounts and a ledger, with amounts kept as integer cents."""
from ledger.account import Account, InsufficientFunds, Ledger

__all__ = ["Account", "InsufficientFunds", "Ledger"]
'''

_MONEY = r'''"""Money amounts as integer cents."""


def to_cents(amount):
    """'12.34', 12.34 or 12 -> cents; ValueError for more than two decimals or junk."""
    text = str(amount).strip()
    sign = 1
    if text.startswith("-"):
        sign = -1
        text = text[1:]
    whole, _, frac = text.partition(".")
    if len(frac) > 2:
        raise ValueError(f"more than two decimal places: {amount!r}")
    if not whole.isdigit() or (frac and not frac.isdigit()):
        raise ValueError(f"not an amount: {amount!r}")
    return sign * (int(whole) * 100 + int(frac.ljust(2, "0")))


def format_cents(cents):
    """1234 -> '12.34', -5 -> '-0.05'."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole}.{frac:02d}"
'''

_ACCOUNT = r'''"""Accounts with an overdraft limit, and a ledger that moves money between them."""
from ledger._money import format_cents, to_cents


class InsufficientFunds(Exception):
    """A withdrawal would take an account below its overdraft limit."""


class Account:
    """A named balance in cents; may go negative down to -overdraft."""

    def __init__(self, name, overdraft=0):
        self.name = name
        self.overdraft = to_cents(overdraft)
        self.balance = 0
        self.history = []

    def deposit(self, amount):
        """Add a positive amount; returns the new balance in cents."""
        cents = to_cents(amount)
        if cents <= 0:
            raise ValueError("deposits must be positive")
        self.balance += cents
        self.history.append(("deposit", cents))
        return self.balance

    def withdraw(self, amount):
        """Take a positive amount out; InsufficientFunds past the overdraft limit."""
        cents = to_cents(amount)
        if cents <= 0:
            raise ValueError("withdrawals must be positive")
        if self.balance - cents < -self.overdraft:
            raise InsufficientFunds(
                f"{self.name}: balance {format_cents(self.balance)}, cannot withdraw {format_cents(cents)}"
            )
        self.balance -= cents
        self.history.append(("withdraw", cents))
        return self.balance

    def statement(self):
        """One line per operation, then the balance."""
        lines = [f"{kind} {format_cents(cents)}" for kind, cents in self.history]
        lines.append(f"balance {format_cents(self.balance)}")
        return "\n".join(lines)


class Ledger:
    """A set of named accounts."""

    def __init__(self):
        self.accounts = {}

    def open(self, name, overdraft=0):
        """Open a new account; ValueError if the name is taken."""
        if name in self.accounts:
            raise ValueError(f"account {name!r} already exists")
        account = Account(name, overdraft)
        self.accounts[name] = account
        return account

    def transfer(self, src, dst, amount):
        """Move amount from src to dst; nothing changes if the withdrawal fails."""
        if src == dst:
            raise ValueError("cannot transfer to the same account")
        source = self.accounts[src]
        target = self.accounts[dst]
        source.withdraw(amount)
        target.deposit(amount)

    def total(self):
        """Sum of all balances, in cents."""
        return sum(a.balance for a in self.accounts.values())

    def richest(self, n=1):
        """Names of the n accounts with the largest balances (ties by name)."""
        ranked = sorted(self.accounts.values(), key=lambda a: (-a.balance, a.name))
        return [a.name for a in ranked[:n]]
'''

_TESTS = r"""import pytest

from ledger import Account, InsufficientFunds, Ledger
from ledger._money import format_cents, to_cents


def test_to_cents():
    assert to_cents("12.34") == 1234
    assert to_cents(12) == 1200
    assert to_cents("0.5") == 50
    assert to_cents("-3.07") == -307
    assert to_cents(7.25) == 725


def test_to_cents_rejects_bad_input():
    for bad in ("1.234", "abc", "1.x", "", "-"):
        with pytest.raises(ValueError):
            to_cents(bad)


def test_format_cents():
    assert format_cents(1234) == "12.34"
    assert format_cents(5) == "0.05"
    assert format_cents(-250) == "-2.50"
    assert format_cents(0) == "0.00"


def test_deposit_and_withdraw():
    a = Account("ann")
    assert a.deposit("10.50") == 1050
    assert a.withdraw(3) == 750
    assert a.balance == 750


def test_no_overdraft_by_default():
    a = Account("ann")
    a.deposit(10)
    assert a.withdraw(10) == 0
    with pytest.raises(InsufficientFunds):
        a.withdraw("0.01")
    assert a.balance == 0


def test_overdraft_limit():
    b = Account("bob", overdraft=50)
    assert b.withdraw(50) == -5000
    with pytest.raises(InsufficientFunds):
        b.withdraw("0.01")


def test_non_positive_amounts_rejected():
    a = Account("ann")
    for bad in (0, -5, "-1.00"):
        with pytest.raises(ValueError):
            a.deposit(bad)
    with pytest.raises(ValueError):
        a.withdraw(0)


def test_history_and_statement():
    a = Account("ann")
    a.deposit("5.25")
    a.withdraw(2)
    assert a.history == [("deposit", 525), ("withdraw", 200)]
    assert a.statement() == "deposit 5.25\nwithdraw 2.00\nbalance 3.25"


def test_ledger_transfer():
    ledger = Ledger()
    ledger.open("a").deposit(100)
    ledger.open("b")
    ledger.transfer("a", "b", "30.01")
    assert ledger.accounts["a"].balance == 6999
    assert ledger.accounts["b"].balance == 3001
    assert ledger.total() == 10000


def test_failed_transfer_changes_nothing():
    ledger = Ledger()
    ledger.open("a").deposit(10)
    ledger.open("b")
    with pytest.raises(InsufficientFunds):
        ledger.transfer("a", "b", 11)
    assert ledger.accounts["a"].balance == 1000
    assert ledger.accounts["b"].balance == 0


def test_ledger_open_with_overdraft():
    ledger = Ledger()
    ledger.open("a", overdraft=5)
    ledger.open("b")
    ledger.transfer("a", "b", 5)
    assert ledger.total() == 0
    with pytest.raises(InsufficientFunds):
        ledger.transfer("b", "a", 6)


def test_transfer_to_same_account():
    ledger = Ledger()
    ledger.open("a")
    with pytest.raises(ValueError):
        ledger.transfer("a", "a", 1)


def test_open_duplicate():
    ledger = Ledger()
    ledger.open("a")
    with pytest.raises(ValueError):
        ledger.open("a")


def test_richest():
    ledger = Ledger()
    ledger.open("x").deposit(5)
    ledger.open("y").deposit(9)
    ledger.open("w").deposit(9)
    assert ledger.richest() == ["w"]
    assert ledger.richest(2) == ["w", "y"]
    assert ledger.richest(5) == ["w", "y", "x"]
"""

BASE = BaseSource(
    name="ledger",
    module="account",
    summary="bank accounts with overdraft limits, transfers and statements, amounts in integer cents",
    files={"ledger/__init__.py": _INIT, "ledger/_money.py": _MONEY, "ledger/account.py": _ACCOUNT},
    tests=_TESTS,
)
