"""Page-number pagination for list endpoints: ``?page=N&page_size=M``."""

from rest_framework.pagination import PageNumberPagination


class ApiPagination(PageNumberPagination):
    """``{"count", "next", "previous", "results"}``; up to 500 rows a page."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
