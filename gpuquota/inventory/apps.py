from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "gpuquota.inventory"
    label = "inventory"
    verbose_name = "Inventory"
