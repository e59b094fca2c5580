from __future__ import annotations

from fleet_rlm.api.tickets import TICKET_SECONDS, TicketBook

PATH = "/api/v1/turns/turn_1/events"


def test_a_ticket_expires_and_is_bound_to_its_path_and_key() -> None:
    now = [1_800_000_000.0]
    book = TicketBook("token", clock=lambda: now[0])
    ticket, expires = book.issue(PATH)
    assert expires == now[0] + TICKET_SECONDS
    now[0] += TICKET_SECONDS + 1
    assert book.redeem(ticket, PATH) == "has expired"
    now[0] -= TICKET_SECONDS
    assert TicketBook("another token").redeem(ticket, PATH) == "is not valid for this stream"
    assert book.redeem(ticket, PATH + "x") == "is not valid for this stream"
    for junk in ("", "x", "1.2", "1.2.3", "999999999999.é.ü"):
        assert book.redeem(junk, PATH) == "is not valid for this stream"
    assert book.redeem(ticket, PATH) is None
    assert book.redeem(ticket, PATH) == "was already used"


def test_servers_sharing_a_token_accept_each_others_tickets() -> None:
    ticket, _ = TicketBook("shared").issue(PATH)
    assert TicketBook("shared").redeem(ticket, PATH) is None
