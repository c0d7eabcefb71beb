/* chat_page.h - the built-in chat page served at GET / (server/chat.html, embedded at
 * build time like openapi.json). Thread: MHD threads. */
#ifndef STRATA_CHAT_PAGE_H
#define STRATA_CHAT_PAGE_H

#include <microhttpd.h>

/* Queues the page with its Content-Security-Policy; needs no API key (the page holds
 * no secret: the API calls it makes carry the key the user types). */
enum MHD_Result route_chat_page(struct MHD_Connection *c);

#endif
