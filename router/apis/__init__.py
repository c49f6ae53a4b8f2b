"""APIs served through the chat path: each translates at the edge (`router.apis.edge`)."""
