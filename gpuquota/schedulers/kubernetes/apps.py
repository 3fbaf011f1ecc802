from django.apps import AppConfig


class KubernetesBackendConfig(AppConfig):
    name = "gpuquota.schedulers.kubernetes"
    label = "kubernetes_backend"
    verbose_name = "Kubernetes backend"
