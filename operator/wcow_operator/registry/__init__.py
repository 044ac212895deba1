"""Reading images from their registries for admission: an adapter (the decisions are
in ``webhook.image_decision``)."""
